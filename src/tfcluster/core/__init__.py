"""The run core: the rules (rules) and the run machine (machine), pure -- a driver feeds the
machine events and carries out the actions it returns (events; the states: states; what a driver
reads of it: run_view), and the machine consults a policy for each rule (policies); the reading of what tasks print
(task_output, output_patterns, keras_hints); and the words said to people (messages)."""
