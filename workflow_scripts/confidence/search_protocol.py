from debatelab.confidence.search import SearchSettings
from debatelab.confidence.stage import search_protocol_job
from debatelab.runlog import job_log

# Guarded: search workers are spawned processes that re-import the main module.
if __name__ == "__main__":
    with job_log(snakemake.log[0]):
        search_protocol_job(
            snakemake.input.streams,
            snakemake.input.calibration,
            snakemake.output.best,
            snakemake.output.trials,
            snakemake.output.history,
            snakemake.params.journal,
            dataset=snakemake.wildcards.dataset,
            pair=snakemake.wildcards.pair,
            protocol=snakemake.wildcards.confidence_protocol,
            settings=SearchSettings(**snakemake.params.settings),
        )
