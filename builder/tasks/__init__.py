"""Task suites: the built-in suite under data/tasks and external KernelBench checkouts."""

from builder.tasks.loading import draw_inputs, instantiate, load_task_module
from builder.tasks.suite import Task, TaskSuite, load_suite, resolve_task

__all__ = ["Task", "TaskSuite", "load_suite", "resolve_task", "load_task_module", "instantiate", "draw_inputs"]
