"""What a run leaves behind and the commands that read it: its record (written: :mod:`.record`;
read back: :mod:`.run_file`), its event log, the per-user index, and the commands that read
them (status and runs, logs, stop, report, profile, stack, attach). Run folders are opened
through :mod:`tfcluster.safe_files`."""
