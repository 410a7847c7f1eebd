"""Cluster files for the JobSet renderer's tests (tests/unit/test_jobset.py, and the pods run for
real in tests/integration/test_pod.py), and how to find a container in a rendered JobSet."""
from __future__ import annotations

# Prints what the program sees: TF_CONFIG, its argv, its task and one secret-looking variable.
PRINTER = ("import json,os,sys;print(json.dumps({'tf_config':json.loads(os.environ['TF_CONFIG']),"
           "'argv':sys.argv[1:],'task':os.environ.get('TFCLUSTER_TASK'),"
           "'token':os.environ.get('API_TOKEN')}))")

FULL = """\
cluster:
  chief: [localhost:2221]
  ps: [localhost:2222, localhost:2223]
  worker: 3
  evaluator: 1
program:
  command: [python3, -c, "{printer}"]
  env: {{API_TOKEN: s3cr3t-value, LEARNING_RATE: 0.1}}
jobs:
  ps: {{env: {{DB_PASSWORD: other-s3cr3t}}, restart: {{policy: on-failure, max_restarts: 5}}}}
  worker: {{gpus: ["0,1", "2,3", "4,5"], restart: {{policy: exit-code, max_restarts: 2}}}}
  chief: {{gpus: ["0,1"]}}
restart: {{policy: never, max_restarts: 3, max_total_restarts: 7}}
success: all-workers
""".format(printer=PRINTER.replace('"', '\\"'))

NO_CHIEF = """\
cluster: {{ps: 1, worker: 4}}
program: {{command: [python, -c, "{printer}"], task_flags: true, env: {{API_TOKEN: tok-1234}}}}
jobs: {{ps: {{env: {{API_TOKEN: tok-5678}}}}}}
restart: {{policy: on-failure, max_restarts: 2}}
""".format(printer=PRINTER.replace('"', '\\"'))


def rjob(manifest, name):
    return next(r for r in manifest["spec"]["replicatedJobs"] if r["name"] == name)


def container(manifest, name):
    return rjob(manifest, name)["template"]["spec"]["template"]["spec"]["containers"][0]
