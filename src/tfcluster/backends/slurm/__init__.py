"""Slurm: the submitting side (launcher), the node driver (node) and the run-folder mailbox
the nodes share."""
