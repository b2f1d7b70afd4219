"""HOW a card is measured: the kit behind `train.py gpu-check` (which architectures to probe on this card, each
probe in a child process with memory read per component and steps timed at two lengths, the table it writes)
and the refit of the step-time model and the estimator from such a table (`train.py refit`)."""
