"""What a run leaves behind: its folder (opened only through runs.files), record, event log,
the per-user index, and the commands that read them (status, logs, stop, report)."""
