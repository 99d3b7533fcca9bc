"""verl integration: an agent loop that plays groundstate episodes, the parquet dataset, the recipe and the merge.

Only `agent_loop` and `merge` import verl; the dataset rows and the recipe (config rendering and
topology validation) work without it, so `groundstate train --engine verl --dry-run` runs anywhere.
"""

AGENT_NAME = "groundstate"  # the name rows carry in `agent_name` and the agent-loop config file registers
