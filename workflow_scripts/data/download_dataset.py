from debatelab.data import write_benchmark
from debatelab.runlog import job_log

with job_log(snakemake.log[0]):
    write_benchmark(
        snakemake.wildcards.benchmark,
        snakemake.wildcards.split,
        snakemake.output[0],
        source=snakemake.params.source,
        seed=snakemake.params.seed,
    )
