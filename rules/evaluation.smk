# Evaluation: each paper's tables beside its published numbers, one report section per paper.
from debatelab.evaluation import PAPER_TITLES, report_section


rule evaluate:
    """One paper's tables in its layout, the published cells beside this run's, its checkable claims and plots."""
    input:
        unpack(evaluation_inputs),
    output:
        report(
            directory(f"{RESULTS}/tables/{{paper}}"),
            patterns=["{name}.html", "{name}.png"],
            category=lambda wc: PAPER_TITLES[wc.paper],
            subcategory=lambda wc: report_section(wc.name),
            labels=lambda wc: {"file": wc.name},
            caption="../report/evaluation.rst",
        ),
    params:
        runs=list(TRAINING_RUNS),
        **EVALUATION_PRICE_PARAMS,
    log:
        f"{LOGS}/evaluate/{{paper}}.log",
    benchmark:
        f"{BENCH}/evaluate/{{paper}}.tsv"
    resources:
        mem_mb=4000,
        runtime=20,
    conda:
        SOFTWARE_ENV
    script:
        "../workflow_scripts/evaluation/evaluate.py"
