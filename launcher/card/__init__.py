"""WHICH card(s) training runs on: the GPUs NVML reports or a card named with --gpu-memory (`detect`), and
how a profile's GPUs divide over this machine and the run's processes (`topology`)."""
