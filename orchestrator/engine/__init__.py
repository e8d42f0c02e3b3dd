"""Running a thread: execution, turns, steps, tool calls, the state tools see."""
