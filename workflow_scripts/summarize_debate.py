from debatelab.reporting import summarize_debate
from debatelab.runlog import job_log

# Guarded: spawn-based engines (vLLM) re-run the main module in their worker processes.
if __name__ == "__main__":
    with job_log(snakemake.log[0]):
        summarize_debate(
            list(snakemake.input.questions),
            list(snakemake.input.turns),
            snakemake.output.table,
            snakemake.output.paper_table,
            snakemake.output.plot,
        )
