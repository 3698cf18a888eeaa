"""Real verl's tool interface at its own import paths, so that a tool class written for real verl
(`from verl.tools.base_tool import BaseTool`) runs here unchanged.

A tool YAML of real verl's layout (`rollout.tool_config`, or real verl's
`actor_rollout_ref.rollout.multi_turn.tool_config_path`) names classes by their dotted path;
verl/agents/class_tools.py loads them and runs each call as real verl's tool agent loop does
(create, execute, release). Built in, by real verl's class names: `gsm8k_tool.Gsm8kTool`,
`geo3k_tool.Geo3kTool`, `search_tool.SearchTool` and `sandbox_fusion_tools.SandboxFusionTool`
(code run in verl's local sandbox). docs/agents.md, "Tool classes".
"""
