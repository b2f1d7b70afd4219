"""Errors the command line turns into exit statuses (see design: 2 bad input, 3 nothing fits)."""

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_BAD_INPUT = 2
# Memory is short: nothing on the ladder fits, or every attempt ran out of memory (a run); this attempt
# ran out of memory (one attempt process). Both tell the caller the same thing: this machine needs less.
EXIT_OUT_OF_MEMORY = 3
EXIT_INTERRUPTED = 130


class UsageError(Exception):
    """Bad input from the user: a profile, a flag or a data path. Exits 2 before anything heavy loads."""

    exit_code = EXIT_BAD_INPUT


class ProfileError(UsageError):
    """A profile value that cannot be used, with the file, the key and how to fix it."""

    def __init__(self, source: str, key: str | None, reason: str, fix: str | None = None):
        self.source = source
        self.key = key
        self.reason = reason
        self.fix = fix
        where = f"{source}: key '{key}'" if key else source
        text = f"{where}: {reason}"
        if fix:
            text += f" (fix: {fix})"
        super().__init__(text)


class SecondSignal(KeyboardInterrupt):
    """What an attempt raises at a second SIGINT/SIGTERM ("stop now"): a KeyboardInterrupt that a signal
    really caused, told apart from one that code (a reward, a library) raised on its own."""
