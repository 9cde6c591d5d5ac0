#!/bin/sh
# Run by slurmctld at the end of every job ($SLURM_JOB_ID or $JOBID): spools its GPU hours.
# slurmctld gives it a bare environment, so everything is named here. PATH is exported: the
# hook itself runs sacct and scontrol, and an unexported PATH never reaches it.
PATH=/usr/bin:/usr/local/bin:/bin    # where sacct and scontrol are
export PATH
exec /opt/trainledger/bin/trainledger slurm-hook \
    --spool /var/spool/trainledger --map-file /etc/trainledger/slurm-map.json \
    >>/var/log/trainledger/slurm-hook.log 2>&1
