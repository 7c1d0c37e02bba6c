"""What each job, user and team cost across the on-prem core and the burst nodes on AWS.

:mod:`coreburst.cost.accounting` reads Slurm's own job records (``sacct``, from slurmdbd);
:mod:`coreburst.cost.report` prices them (``coreburst cost report``).
"""
