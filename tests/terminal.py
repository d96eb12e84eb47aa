"""A command as a terminal starts it: its own session (a Ctrl-C it sends itself reaches its own processes
only) and Ctrl-C's default action, whatever the test process does with SIGINT. A pytest-xdist worker, or a
test before, may ignore SIGINT, and an ignored signal stays ignored across exec: an injected Ctrl-C would
then not stop the command. subprocess.run(..., **AS_TYPED)."""

import signal

AS_TYPED = {"start_new_session": True, "preexec_fn": lambda: signal.signal(signal.SIGINT, signal.SIG_DFL)}
