"""Real verl's `verl.experimental` import path, for user code written against it (only `dataset.sampler`)."""
