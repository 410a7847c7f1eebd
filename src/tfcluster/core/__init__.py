"""The run core: the rules and the run machine, and the reading of task output. Pure: every
engine feeds it events and carries out the actions it returns."""
