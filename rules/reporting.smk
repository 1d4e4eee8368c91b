# Summaries of every stage: tables, paper layouts and plots, all in the Snakemake report.


rule summarize_zero_shot:
    """Accuracy, parse failures, confidence and tokens per dataset and agent, with a plot."""
    input:
        unpack(zero_shot_summary_inputs),
    output:
        table=report(f"{RESULTS}/summary/zero_shot.csv", category="Zero-shot", caption="../report/zero_shot_table.rst"),
        plot=report(f"{RESULTS}/summary/zero_shot.png", category="Zero-shot", caption="../report/zero_shot_plot.rst"),
    params:
        prices=MODEL_PRICES,
        **ZERO_SHOT_GPU_PARAMS,
    log:
        f"{LOGS}/summary/zero_shot.log",
    resources:
        mem_mb=2000,
        runtime=10,
    conda:
        SOFTWARE_ENV
    script:
        "../workflow_scripts/reporting/summarize_zero_shot.py"


rule summarize_debate:
    """Accuracy, parse failures, communication and tokens per dataset and protocol; SVR-MAD Table 1; a plot."""
    input:
        unpack(debate_summary_inputs),
    output:
        table=report(f"{RESULTS}/summary/debate.csv", category="Debate", caption="../report/debate_table.rst"),
        paper_table=report(
            f"{RESULTS}/summary/debate_paper.csv", category="Debate", caption="../report/debate_paper_table.rst"
        ),
        plot=report(
            f"{RESULTS}/summary/debate_cost_accuracy.png", category="Debate", caption="../report/debate_plot.rst"
        ),
    params:
        prices=MODEL_PRICES,
        **DEBATE_GPU_PARAMS,
    log:
        f"{LOGS}/summary/debate.log",
    resources:
        mem_mb=2000,
        runtime=10,
    conda:
        SOFTWARE_ENV
    script:
        "../workflow_scripts/reporting/summarize_debate.py"


rule summarize_confidence:
    """Lift over the best zero-shot agent per dataset and protocol, averaged over pairs, with t-test counts."""
    input:
        confidence_metric_files(),
    output:
        table=report(f"{RESULTS}/summary/confidence.csv", category="Confidence protocols",
                     caption="../report/confidence_table.rst"),
        lift=report(f"{RESULTS}/summary/confidence_lift.csv", category="Confidence protocols",
                    caption="../report/confidence_lift.rst"),
        paper_table=report(f"{RESULTS}/summary/confidence_paper.csv", category="Confidence protocols",
                           caption="../report/confidence_paper.rst"),
        plot=report(f"{RESULTS}/summary/confidence_lift.png", category="Confidence protocols",
                    caption="../report/confidence_lift_plot.rst"),
    params:
        calibrator=CALIBRATION["report_calibrator"],
        alpha=SEARCH["alpha"],
    log:
        f"{LOGS}/summary/confidence.log",
    resources:
        mem_mb=2000,
        runtime=10,
    conda:
        SOFTWARE_ENV
    script:
        "../workflow_scripts/reporting/summarize_confidence.py"


rule summarize_comparisons:
    """Paired accuracy comparisons on the same questions (evaluation.comparisons), each difference with its 95 % interval."""
    input:
        zero_shot=zero_shot_files(),
        questions=debate_files("questions"),
    output:
        table=report(f"{RESULTS}/summary/comparisons.csv", category="Comparisons", caption="../report/comparisons.rst"),
        plot=report(f"{RESULTS}/summary/comparisons.png", category="Comparisons", caption="../report/comparisons.rst"),
    params:
        comparisons=EXP.comparisons,
    log:
        f"{LOGS}/summary/comparisons.log",
    resources:
        mem_mb=2000,
        runtime=10,
    conda:
        SOFTWARE_ENV
    script:
        "../workflow_scripts/reporting/summarize_comparisons.py"
