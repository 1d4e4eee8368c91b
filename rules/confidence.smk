# The confidence paper's stages (Elahi & Di Eugenio, arXiv:2606.13591): streams → calibration fitting → protocol search → test
# split. Pure computation on cached generations: no model is called, everything runs on CPU. The
# experiment summary is `summarize_confidence` in reporting.smk.


rule streams:
    """The four (agent, stream) answers and raw confidences of a pair of agents."""
    input:
        unpack(pair_inputs),
    output:
        f"{RESULTS}/streams/{{dataset}}/{{pair}}.parquet",
    params:
        agents=lambda wc: PAIRS[wc.pair]["agents"],
        estimators=CALIBRATION["estimators"],
        val_dataset=pair_validation_dataset,
    log:
        f"{LOGS}/streams/{{dataset}}/{{pair}}.log",
    resources:
        mem_mb=2000,
        runtime=10,
    conda:
        SOFTWARE_ENV
    script:
        "../workflow_scripts/confidence/streams.py"


rule fit_calibrators:
    """One calibrator per (run, estimator, kind, agent, stream), fitted on the run's validation part
    (a bootstrap sample of a fixed validation split, else a seeded cut); the runs loop inside the job."""
    input:
        f"{RESULTS}/streams/{{dataset}}/{{pair}}.parquet",
    output:
        calibration=f"{RESULTS}/calibration/{{dataset}}/{{pair}}.json",
        report=report(
            f"{RESULTS}/calibration/{{dataset}}/{{pair}}.csv",
            category="Calibration",
            caption="../report/calibration_table.rst",
        ),
    params:
        seed=config["seed"],
        settings=EXP.calibration_settings(),
    log:
        f"{LOGS}/calibration/{{dataset}}/{{pair}}.log",
    benchmark:
        f"{BENCH}/calibration/{{dataset}}/{{pair}}.tsv"
    resources:
        mem_mb=2000,
        runtime=30,
    conda:
        SOFTWARE_ENV
    script:
        "../workflow_scripts/confidence/fit_calibrators.py"


rule search_protocol:
    """Optuna TPE over one protocol's θ for every (estimator, calibrator, run). The study journal
    (not an output, so a rerun resumes it) is shared by every process working on the same study."""
    input:
        streams=f"{RESULTS}/streams/{{dataset}}/{{pair}}.parquet",
        calibration=f"{RESULTS}/calibration/{{dataset}}/{{pair}}.json",
    output:
        best=f"{RESULTS}/search/{{dataset}}/{{pair}}/{{confidence_protocol}}.json",
        trials=f"{RESULTS}/search/{{dataset}}/{{pair}}/{{confidence_protocol}}.trials.parquet",
        history=report(
            f"{RESULTS}/search/{{dataset}}/{{pair}}/{{confidence_protocol}}.history.png",
            category="Protocol search",
            caption="../report/search_history.rst",
        ),
    params:
        journal=lambda wc: f"{RESULTS}/search/{wc.dataset}/{wc.pair}/{wc.confidence_protocol}.optuna.journal",
        settings=EXP.search_settings(),
    log:
        f"{LOGS}/search/{{dataset}}/{{pair}}/{{confidence_protocol}}.log",
    benchmark:
        f"{BENCH}/search/{{dataset}}/{{pair}}/{{confidence_protocol}}.tsv"
    threads: SEARCH["workers"]
    resources:
        mem_mb=4000,
        runtime=120,
    conda:
        SOFTWARE_ENV
    script:
        "../workflow_scripts/confidence/search_protocol.py"


rule apply_protocol:
    """Every baseline and searched protocol on the test split, with reliability and accuracy-rejection plots."""
    input:
        streams=f"{RESULTS}/streams/{{dataset}}/{{pair}}.parquet",
        calibration=f"{RESULTS}/calibration/{{dataset}}/{{pair}}.json",
        searches=search_files,
    output:
        predictions=f"{RESULTS}/protocols/{{dataset}}/{{pair}}/predictions.parquet",
        metrics=f"{RESULTS}/protocols/{{dataset}}/{{pair}}/metrics.csv",
        reliability=report(
            f"{RESULTS}/protocols/{{dataset}}/{{pair}}/reliability.png",
            category="Confidence protocols",
            caption="../report/confidence_reliability.rst",
        ),
        rejection=report(
            f"{RESULTS}/protocols/{{dataset}}/{{pair}}/accuracy_rejection.png",
            category="Confidence protocols",
            caption="../report/confidence_rejection.rst",
        ),
    params:
        ece_bins=CALIBRATION["ece_bins"],
        ece_weighting=CALIBRATION["ece_weighting"],
        plot_calibrator=CALIBRATION["report_calibrator"],
    log:
        f"{LOGS}/protocols/{{dataset}}/{{pair}}.log",
    resources:
        mem_mb=2000,
        runtime=30,
    conda:
        SOFTWARE_ENV
    script:
        "../workflow_scripts/confidence/apply_protocol.py"
