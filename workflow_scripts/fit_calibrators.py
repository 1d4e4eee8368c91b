from debatelab.confidence_stage import fit_calibrators_job
from debatelab.runlog import job_log

if __name__ == "__main__":
    with job_log(snakemake.log[0]):
        fit_calibrators_job(
            snakemake.input[0],
            snakemake.output.calibration,
            snakemake.output.report,
            seed=snakemake.params.seed,
            **dict(snakemake.params.settings),
        )
