"""What a project defines (tools, prompts, agents, hooks) and how a definitions folder is read."""
