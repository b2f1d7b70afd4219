"""A fake NVML for planner tests: the calls launcher.card.detect makes, with pynvml's names and error classes."""

from __future__ import annotations

from types import SimpleNamespace


class FakeNvml:
    """Stands in for pynvml: the calls launcher.card.detect makes, with pynvml's names and error classes."""

    class NVMLError(Exception):
        pass

    class NVMLError_LibraryNotFound(NVMLError):
        pass

    def __init__(self, cards=(), driver_missing=False, driver="550.54.15", cuda=12040):
        self.cards = list(cards)
        self.driver_missing = driver_missing
        self.driver = driver
        self.cuda = cuda
        self.initialised = False
        self.shut_down = False

    def nvmlInit(self):
        if self.driver_missing:
            raise self.NVMLError_LibraryNotFound("NVML Shared Library Not Found")
        self.initialised = True

    def nvmlShutdown(self):
        self.shut_down = True

    def nvmlSystemGetDriverVersion(self):
        return self.driver

    def nvmlSystemGetCudaDriverVersion(self):
        return self.cuda

    def nvmlDeviceGetCount(self):
        return len(self.cards)

    def nvmlDeviceGetHandleByIndex(self, index):
        return self.cards[index]

    def nvmlDeviceGetName(self, handle):
        return handle["name"]

    def nvmlDeviceGetUUID(self, handle):
        return handle["uuid"]

    def nvmlDeviceGetMemoryInfo(self, handle):
        return SimpleNamespace(total=handle["total"], free=handle["free"], used=handle["total"] - handle["free"])

    def nvmlDeviceGetCudaComputeCapability(self, handle):
        return handle["cc"]
