from agents import Agent, OpenAIChatCompletionsModel, Runner as AgentsRunner, function_tool, set_tracing_disabled
from openai import AsyncOpenAI
from fulmen.agent.api import rollout
from tests.gateway.scripted_upstream import Reply
from tests.integrations.through_runner import run_one

@rollout
async def calc(task, llm) -> float:
    @function_tool
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b
    client = AsyncOpenAI(base_url=llm.base_url, api_key=llm.api_key)
    async with client:
        agent = Agent(name="calculator", instructions="Use the add tool.", tools=[add],
            model=OpenAIChatCompletionsModel(model=llm.model, openai_client=client))
        result = await AgentsRunner.run(agent, task["question"])
    return 1.0 if result.final_output == "4" else 0.0

async def test_dbg(gw):
    gw.script.replies.extend([Reply(tool_calls=[("add", {"a": 2, "b": 2})]), Reply(content="4")])
    records = await run_one(gw, calc, ["openai_agents", "openai"], {"question": "q"})
    print([ (c.response_id) for c in records.calls])
    for s in records.spans:
        print(s.name, s.span_id, s.parent_id, s.attributes.get("output.value","")[:60])
    assert 0
