"""Where a run's processes run: DDP workers started by the job (`ddp`), the GPU pool of a machine
(`gpu_pool`), what a sweep asks SLURM for (`slurm_request`) and a run inside a SLURM job (`slurm_job`)."""


def job():
    """This process's job: the signals it takes, its threads, whether its ranks exist already, and what
    follows a stop (`slurm_job.Job`, inert outside a SLURM job). What runs a job never asks which
    launcher started it."""
    from ablate.cluster import slurm_job

    return slurm_job.job()
