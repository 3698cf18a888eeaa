"""Real verl's interaction interface at its own import paths (`from verl.interactions.base import
BaseInteraction`), so an interaction class written for real verl runs here unchanged.

An interaction is the user's side of a conversation: after a model turn that calls no tool it
answers as the user (feedback, a follow-up), may score the turn, and may end the trajectory.
`rollout.interaction_config` (real verl's `multi_turn.interaction_config_path`) names the classes;
a data row picks one by `extra_info.interaction_kwargs.name`. verl/agents/interactions.py runs
them. Built in: `gsm8k_interaction.Gsm8kInteraction`. docs/agents.md, "Interactions".
"""
