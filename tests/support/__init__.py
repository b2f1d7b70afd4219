"""What the tests stand in for and share: fake child processes, a fake vLLM server, a fake NVML, the GPU
rehearsal's stubs, and the one way tests run `train.py`."""
