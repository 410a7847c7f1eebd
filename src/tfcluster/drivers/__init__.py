"""The launcher's driver for the local and ssh backends: start the plan's tasks, pump their
output into the run core, carry out its actions."""
