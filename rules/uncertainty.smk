rule uncertainty:
    """UDPO measures per debate and the UMAD decomposition across threads, with failure diagnostics and selective prediction."""
    input:
        f"{RESULTS}/debate/{{dataset}}/{{protocol}}/questions.parquet",
    output:
        measures=f"{RESULTS}/uncertainty/{{dataset}}/{{protocol}}.parquet",
        rounds=f"{RESULTS}/uncertainty/{{dataset}}/{{protocol}}.rounds.parquet",
        diagnostics=f"{RESULTS}/uncertainty/{{dataset}}/{{protocol}}.diagnostics.csv",
        selective=f"{RESULTS}/uncertainty/{{dataset}}/{{protocol}}.selective.csv",
        plot=report(
            f"{RESULTS}/uncertainty/{{dataset}}/{{protocol}}.selective.png",
            category="Uncertainty",
            caption="../report/uncertainty_selective.rst",
        ),
    params:
        settings=EXP.uncertainty_settings(),
    log:
        f"{LOGS}/uncertainty/{{dataset}}/{{protocol}}.log",
    resources:
        mem_mb=2000,
        runtime=10,
    conda:
        SOFTWARE_ENV
    script:
        "../workflow_scripts/uncertainty/uncertainty.py"
