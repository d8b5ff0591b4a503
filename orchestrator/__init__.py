"""orchestrator: one GPT-OSS endpoint over AMD Instinct pools of several generations and sites."""

__version__ = "0.1.0"
