"""The launcher's driver for the local, ssh and Ray backends and per-host agents: the
supervisor's loop over the run core (supervisor, tasks), the output pump (pump), what the
person sees (display), the checks before a run (preflight, doctor), ``--dry-run`` (describe),
and the launchers behind the launcher seam (launcher, ray_launcher)."""
