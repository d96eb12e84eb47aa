"""How a run is steered and watched from outside, none of which decides a figure of it: the one owner of
a stop on a signal (`stop`), the faults tests inject (`faults`), the progress a terminal or a log shows
(`progress`). Not result code (ablate.records.staleness.NOT_RESULT): a change here stales no record."""
