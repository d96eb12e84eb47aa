"""One process's part of a run: the LightningModule (`module`), building, fitting and recording a run
(`fit`), its callbacks, the one owner of a stop (`stop`), the test protocol (`evaluation`), the machine's
precision and devices (`hardware`), injected faults for the tests (`faults`)."""
