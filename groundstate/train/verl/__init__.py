"""verl integration: an agent loop that plays groundstate episodes, the parquet dataset, the recipe and the merge.

Only `agent_loop` and `merge` import verl; the dataset rows and the recipe (config rendering and
topology validation) work without it, so `groundstate train --engine verl --dry-run` runs anywhere.
"""

AGENT_NAME = "groundstate"  # the name rows carry in `agent_name` and the agent-loop config file registers
ONLINE_SETTINGS_KEY = "groundstate_online"  # data.<this>: the online sampler's settings file (`train.verl.online`)
ONLINE_SETTINGS_FILE = "online_sampler.json"  # written by the recipe beside the agent-loop file
ONLINE_DRAW = "online_draw"  # extra_info.<this>: a training row the online sampler drew (its rewards are evidence)
