from debatelab.runlog import job_log
from debatelab.testbed.build import build_micro_model

with job_log(snakemake.log[0]):
    build_micro_model(snakemake.output[0], threads=snakemake.threads)
