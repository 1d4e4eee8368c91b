rule summarize:
    """Accuracy, parse failures, confidence and tokens per dataset and agent, with a plot."""
    input:
        zero_shot_files(),
    output:
        table=report(f"{RESULTS}/summary/zero_shot.csv", category="Zero-shot", caption="../report/zero_shot_table.rst"),
        plot=report(f"{RESULTS}/summary/zero_shot.png", category="Zero-shot", caption="../report/zero_shot_plot.rst"),
    log:
        f"{LOGS}/summary/zero_shot.log",
    resources:
        mem_mb=2000,
        runtime=10,
    script:
        "../workflow_scripts/summarize_zero_shot.py"


rule summarize_debate:
    """Accuracy, parse failures, communication and tokens per dataset and protocol; SVR-MAD Table 1; a plot."""
    input:
        questions=debate_question_files(),
        turns=debate_turn_files(),
    output:
        table=report(f"{RESULTS}/summary/debate.csv", category="Debate", caption="../report/debate_table.rst"),
        paper_table=report(
            f"{RESULTS}/summary/debate_paper.csv", category="Debate", caption="../report/debate_paper_table.rst"
        ),
        plot=report(
            f"{RESULTS}/summary/debate_cost_accuracy.png", category="Debate", caption="../report/debate_plot.rst"
        ),
    log:
        f"{LOGS}/summary/debate.log",
    resources:
        mem_mb=2000,
        runtime=10,
    script:
        "../workflow_scripts/summarize_debate.py"
