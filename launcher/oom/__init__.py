"""WHAT an out-of-memory failure says: recognised and its figures read (`read`), where in training it
happened (`site`), and what to change, with its cost (`explain`, also the `explain-oom` command)."""
