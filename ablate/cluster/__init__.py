"""Where a run's processes run: DDP workers started by the job (`ddp`), the GPU pool of a machine
(`gpu_pool`), what a sweep asks SLURM for (`slurm_request`) and a run inside a SLURM job (`slurm_job`)."""
