from debatelab.confidence.stage import CalibrationSettings, fit_calibrators_job
from debatelab.runlog import job_log

with job_log(snakemake.log[0]):
    fit_calibrators_job(
        snakemake.input[0],
        snakemake.output.calibration,
        snakemake.output.report,
        seed=snakemake.params.seed,
        settings=CalibrationSettings(**snakemake.params.settings),
    )
