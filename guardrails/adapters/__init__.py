"""What the daemon talks to: AWS, Slurm, Slack, DCGM (Prometheus)."""
