"""Core and burst: overflow the on-prem Slurm queue to AWS nodes through Slurm's power saving."""
