"""The one exception a command raises for bad input: printed as one line, exit status 2."""


class UsageError(Exception):
    """Bad input from the user: a path, a flag value, a file's contents."""
