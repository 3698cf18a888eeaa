"""Run state on disk: durable files, checkpoint folders and manifests, the run folder and its
lock, the full training state and where a run resumes.

    durable_files.py  atomic writes, fsync, checksums, the kill-point harness hook
    manager.py        CheckpointManager: checkpoints/step_NNNNNN, manifests, newest-verifying lookup
    model_files.py    model weights as Hugging Face folders / safetensors (LoRA merged or not)
    rng_state.py      RNG states of every generator a step uses
    full_state.py     gathers the components' state_dict()s into a full checkpoint and back
    run_folder.py     save_dir bookkeeping: previous_run_N/, run_state.json, final-save records
    run_lock.py       one run per save_dir
    resume.py         where a run starts (checkpoint.resume) and which config changes are allowed

Nothing here imports the trainer: the components are passed in (verl/trainer/run_state.py).
"""
