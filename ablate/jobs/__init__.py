"""One job of a command: skip, resume or train the run a config names (`train`), a sweep member's config
and outcome (`sweep`), and the plan of a command (`plan`)."""
