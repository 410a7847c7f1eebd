"""A training task that reads its input through the cluster's tf.data service, as a user writes
it: build the dataset, hand it to tfcluster.runtime.distribute (one distributed_epoch job shared
by every worker), iterate. Writes the elements it saw to OUT_DIR/<task>.json.

    python data_service_reader.py OUT_DIR [NUM_ELEMENTS [GO_FILE]]
"""
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import tensorflow as tf

import tfcluster.runtime as rt

out_dir = sys.argv[1]
n = int(sys.argv[2]) if len(sys.argv) > 2 else 200
if len(sys.argv) > 3:          # a test's cue: read only once this file exists
    import time
    while not os.path.exists(sys.argv[3]):
        time.sleep(0.1)
assert os.environ.get("TFCLUSTER_DATA_SERVICE", "").startswith("grpc://"), os.environ.get("TFCLUSTER_DATA_SERVICE")
config = json.loads(os.environ["TF_CONFIG"])
assert set(config["cluster"]) == {"worker"}, config      # the data service is not a TF job
dataset = tf.data.Dataset.range(n).map(lambda x: x * 1)
dataset = rt.distribute(dataset, job_name="epoch")
seen = [int(x) for x in dataset.as_numpy_iterator()]
task = os.environ["TFCLUSTER_TASK"].replace(":", "-")
with open(os.path.join(out_dir, task + ".json"), "w") as f:
    json.dump(seen, f)
print(f"{task}: read {len(seen)} elements through {os.environ['TFCLUSTER_DATA_SERVICE']}", flush=True)
