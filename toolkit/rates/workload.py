"""The requests of a step: token lengths drawn per request, prompts of exact lengths or from a dataset, cold.

Synthetic prompts are built once per distinct length with the server's tokenizer (`toolkit.matrix.prompts`); each
request then gets its own prefix (run, step, request), so that no request finds another's blocks in the prefix
cache (cold prompts), unless asked otherwise. The prompt tokens the server counts come back in each reply's usage
and are what the records keep.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from toolkit.loadgen.client import build_request
from toolkit.loadgen.conversations import PlannedTurn
from toolkit.loadgen.embeddings import EMBEDDINGS_PATH, embeddings_body
from toolkit.loadgen.images import add_images, image_url
from toolkit.loadgen.open_loop import PlannedRequest
from toolkit.loadgen.stream_events import Endpoint
from toolkit.matrix.prompts import build_prompt
from toolkit.matrix.server_api import ServerAPI
from toolkit.method.prefix_cache import expected_hit_rate, expected_hit_tokens, expected_trace_hit_rate
from toolkit.params import ParamsError
from toolkit.rates.classes import class_rng, draw_classes
from toolkit.rates.dataset import DatasetError, DatasetItem
from toolkit.rates.lengths import draw_lengths, prefix_groups
from toolkit.rates.model_mix import draw_models, model_rng
from toolkit.rates.params import RateParams
from toolkit.rates.prompt_sources import prompt_source
from toolkit.rates.request_kinds import RequestKinds
from toolkit.rates.traces import MAX_TRACE_TOKENIZE_CALLS, blocks_used

TraceBlocks = tuple[list[tuple[int, ...]], int]  # each request's trace block ids, and the tokens of a block


class Workload:
    """Builds each step's requests; keeps what it measured with the server's tokenizer between steps."""

    def __init__(
        self,
        params: RateParams,
        api: ServerAPI,
        model: str,
        run_id: str,
        dataset: list[DatasetItem] | None = None,
        block_size: int | None = None,
        class_datasets: dict[str, list[DatasetItem]] | None = None,
    ) -> None:
        """`dataset`: the sweep's requests (its `dataset`, read); `class_datasets`: each class's own, by name."""
        self.params, self.api, self.model, self.run_id, self.dataset = params, api, model, run_id, dataset
        self.block_size = block_size  # the server's KV block, for the hit rate a step should see
        self.expected_hit_rates: dict[int, float | None] = {}  # step -> the hit rate its construction implies
        self.drawn_classes: dict[int, list[str]] = {}  # a class sweep's step -> each request's class
        self.drawn_models: dict[int, list[str]] = {}  # a model mix's step -> each request's model
        self.mix = params.model_mix()  # the model mix's weights (None: one model)
        self._shared: dict[tuple[str | None, int, int], str] = {}  # (class, step, prefix) -> its text
        self._overhead: dict[bool, int] = {}  # chat -> what the server counts for an empty prompt (BOS, a template)
        self._bare: int | None = None  # the same for an empty text without a chat template
        self._blocks: dict[tuple[int, ...], str] = {}  # a trace block (its id and those before it) -> its text
        self._heads: dict[tuple[int, ...], tuple[str, int]] = {}  # a prompt's trace blocks -> text, tokens
        self._calls_from = 0  # the server API's /tokenize calls when a trace's prompts began to be built
        self.chat = params.endpoint == "chat"
        self.carried = Carried.of(params.kinds())  # structured output, tools, images: every request's
        self.class_carried = [Carried.of(params.kinds(c)) for c in params.classes or ()]  # a class's: its requests'
        self.class_sources = [prompt_source(params, c) for c in params.classes or ()]  # its prompts': own or sweep's
        own = class_datasets or {}
        self.class_items = [own.get(c.name, dataset) if source.dataset is not None else None
                            for c, source in zip(params.classes or (), self.class_sources, strict=True)]  # fmt: skip
        self._fillers: dict[tuple[int, bool], str] = {}  # (prompt tokens, chat) -> the text after the prefix
        self._reply_tokens: dict[str, int] = {}  # a dataset item -> its reference reply's tokens
        for c, items in zip(params.classes or (), self.class_items, strict=True):
            if items and (c.endpoint or params.endpoint) != "chat" and (item := _chat_item(items)):
                raise DatasetError(f"classes.{c.name}.dataset: {item.where}: chat messages need endpoint: chat")
        if params.classes is None and dataset and not self.chat and (item := _chat_item(dataset)):
            raise DatasetError(f"dataset: {item.where}: chat messages need endpoint: chat")

    def _build(self, text: str, out: int, endpoint: Endpoint | None = None,
               carried: Carried | None = None) -> tuple[str, dict[str, Any]]:  # fmt: skip
        """A request's path and body: the sweep's endpoint (or `endpoint`, a class's) and model, its response format
        or tools if any (the sweep's, or `carried`, a class's)."""
        kinds = carried or self.carried
        return build_request(endpoint or self.params.generation_endpoint, self.model, text, out,
                             response_format=kinds.response_format, tools=kinds.tools,
                             tool_choice=kinds.tool_choice)  # fmt: skip

    def prefix(self, step: int, request: int) -> str:
        """What starts every prompt: unique per request when prompts are cold, one per run otherwise."""
        if not self.params.cold_prompts:
            return f"[rate sweep {self.run_id}] "
        return f"[rate sweep {self.run_id} step {step:03d} request {request:06d}] "

    async def requests(
        self, step: int, n: int, lengths: tuple[list[int], list[int]] | None = None, blocks: TraceBlocks | None = None
    ) -> list[PlannedRequest]:
        """The `n` requests of step `step` (the same seed and step give the same requests); `lengths`: each
        request's input and output tokens as given (a replayed run's) instead of drawn; `blocks`: each request's
        trace blocks (a Mooncake trace's hash_ids), which its prompt starts with."""
        if self.params.endpoint == "embeddings":
            return await self.embedding_requests(step, n)
        if self.params.classes is not None:
            return await self.class_requests(step, n)
        planned = await self._requests(step, n, lengths, blocks)
        if self.mix is not None:  # each arrival's model drawn by weight, from a generator of its own
            models = draw_models(self.mix, len(planned), model_rng(self.params.seed, step))
            for request, model in zip(planned, models, strict=True):
                request.body["model"] = model
            self.drawn_models[step] = models
        self.add_images(step, planned)
        return planned

    def add_images(self, step: int, planned: list[PlannedRequest], carried: list[Carried] | None = None) -> None:
        """Each request's synthetic PNGs (toolkit.loadgen.images), as many as the sweep's `images` (or its
        `carried`'s, a class's), each from its own seed (the sweep's, the step, the request, the image): made here,
        before the step is sent, and nothing added without images."""
        for i, request in enumerate(planned):
            kinds = carried[i] if carried else self.carried
            if kinds.images:
                width, height = kinds.image_size
                add_images(request.body, [image_url(width, height, (self.params.seed, step, i, k))
                                          for k in range(kinds.images)])  # fmt: skip

    async def _requests(
        self, step: int, n: int, lengths: tuple[list[int], list[int]] | None, blocks: TraceBlocks | None
    ) -> list[PlannedRequest]:
        rng = np.random.default_rng((self.params.seed, step, 1))
        outputs = lengths[1] if lengths else draw_lengths(self.params.output_tokens, n, rng)
        if self.dataset is not None:
            order = rng.permutation(len(self.dataset))
            items = [self.dataset[order[i % len(order)]] for i in range(n)]
            return [await self._from_item(step, i, item, outputs[i]) for i, item in enumerate(items)]
        inputs = lengths[0] if lengths else draw_lengths(self.params.input_tokens, n, rng)
        if self.params.workload == "shared-prefix":
            return await self._shared_prefix_requests(step, inputs, outputs, rng)
        if blocks is not None:
            return await self._trace_requests(step, inputs, outputs, blocks)
        return await self.cold_requests(step, inputs, outputs)

    async def cold_requests(self, step: int, inputs: list[int], outputs: list[int]) -> list[PlannedRequest]:
        """Prompts of exactly these lengths (as the server counts them at the sweep's endpoint), each with its own
        prefix, carrying the sweep's kinds."""
        return [await self._cold_request(step, i, tokens, out)
                for i, (tokens, out) in enumerate(zip(inputs, outputs, strict=True))]  # fmt: skip

    async def _cold_request(self, step: int, i: int, tokens: int, out: int, endpoint: Endpoint | None = None,
                            carried: Carried | None = None) -> PlannedRequest:  # fmt: skip
        """Request `i`: its own prefix, then a filler up to `tokens` as the server counts them at its endpoint."""
        chat = self.chat if endpoint is None else endpoint == "chat"
        text = self.prefix(step, i) + await self._filler(tokens, chat)
        path, body = self._build(text, out, endpoint, carried)
        return PlannedRequest(path, body, tokens)

    async def class_requests(self, step: int, n: int) -> list[PlannedRequest]:
        """The `n` requests of a class sweep's step: each arrival's class drawn by weight (`drawn_classes`), its
        lengths drawn from its class's, its prompt from its class's source (`_class_part`), sent to its class's
        endpoint (the sweep's when it names none), its body carrying the class's `priority` and `model` if it has
        them, and its class's request kinds (each the sweep's where the class gives none). With shared prefixes,
        the step's expected hit rate over every class's prompts (unknown beside a dataset's)."""
        classes = self.params.classes
        assert classes is not None
        picks = draw_classes(classes, n, class_rng(self.params.seed, step))
        by_arrival: dict[int, PlannedRequest] = {}
        hits: list[int | None] = []  # each class's expected cached tokens (None: unknown)
        for c, cls in enumerate(classes):  # a generator per class: its draws do not depend on another's
            rng = np.random.default_rng((self.params.seed, step, 1, c))
            mine = [i for i, pick in enumerate(picks) if pick == c]
            inputs = None if cls.input_tokens is None else draw_lengths(cls.input_tokens, len(mine), rng)
            outputs = draw_lengths(cls.output_tokens, len(mine), rng)
            part, found = await self._class_part(step, c, mine, inputs, outputs, rng)
            by_arrival |= dict(zip(mine, part, strict=True))
            hits.append(found if mine else 0)
        planned = [by_arrival[i] for i in range(n)]
        if any(source.shared_prefix for source in self.class_sources):
            total = sum(r.input_tokens or 0 for r in planned)
            self.expected_hit_rates[step] = None if None in hits or not total else sum(h or 0 for h in hits) / total
        carried = [self.class_carried[pick] for pick in picks]
        self.add_images(step, planned, carried)
        for request, pick in zip(planned, picks, strict=True):
            if (priority := classes[pick].priority) is not None:
                request.body["priority"] = priority
            if (model := classes[pick].model) is not None:  # e.g. a LoRA adapter on the sweep's base model
                request.body["model"] = model
        self.drawn_classes[step] = [classes[pick].name for pick in picks]
        return planned

    async def _class_part(self, step: int, c: int, mine: list[int], inputs: list[int] | None, outputs: list[int],
                          rng: np.random.Generator) -> tuple[list[PlannedRequest], int | None]:  # fmt: skip
        """Class `c`'s requests of the step (arrivals `mine`, with their drawn lengths): its dataset's items in an
        order of its own, its own shared prefixes (none shared with another class) before each rest, or cold; and
        the prompt tokens they should find cached (None: unknown, a dataset's or without the server's block)."""
        assert self.params.classes is not None
        cls, source, carried = self.params.classes[c], self.class_sources[c], self.class_carried[c]
        if (items := self.class_items[c]) is not None:
            order = rng.permutation(len(items))
            return [await self._from_item(step, i, items[order[k % len(order)]], outputs[k], cls.endpoint, carried)
                    for k, i in enumerate(mine)], None  # fmt: skip
        assert inputs is not None
        if not source.shared_prefix:
            return [await self._cold_request(step, i, tokens, out, cls.endpoint, carried)
                    for i, tokens, out in zip(mine, inputs, outputs, strict=True)], 0  # fmt: skip
        assert source.prefixes is not None and source.prefix_tokens is not None
        groups = prefix_groups(rng, len(mine), source.prefixes, source.prefix_choice)
        planned = [await self._shared_prefix_request(step, i, group, tokens, out, source.prefix_tokens, cls.endpoint,
                                                     carried, cls.name)
                   for i, group, tokens, out in zip(mine, groups, inputs, outputs, strict=True)]  # fmt: skip
        hits = expected_hit_tokens(groups, source.prefix_tokens, self.block_size) if self.block_size else None
        return planned, hits

    async def embedding_requests(self, step: int, n: int) -> list[PlannedRequest]:
        """The `n` embeddings requests of step `step`: `batch_size` inputs each, each input `input_tokens` long (as
        the server counts it) with its own prefix (cold: no two inputs alike)."""
        batch = self.params.inputs_per_request()
        rng = np.random.default_rng((self.params.seed, step, 1))
        lengths = draw_lengths(self.params.input_tokens, n * batch, rng)
        planned = []
        for i in range(n):
            inputs = [self.prefix(step, i * batch + j) + await self._filler(lengths[i * batch + j])
                      for j in range(batch)]  # fmt: skip
            tokens = sum(lengths[i * batch : (i + 1) * batch])
            planned.append(PlannedRequest(EMBEDDINGS_PATH, embeddings_body(self.model, inputs), tokens))
        return planned

    async def conversations(self, step: int, n: int) -> list[list[PlannedTurn]]:
        """The `n` conversations of step `step`: `turns` messages each (a dataset item's user turns, or
        `input_tokens` long), the first starting with the conversation's own marker (nothing shared between them)."""
        params = self.params
        assert params.turns is not None
        rng = np.random.default_rng((params.seed, step, 1))
        k = params.turns
        outputs = draw_lengths(params.output_tokens, n * k, rng)
        thinks: list[float | None] = [None] * (n * k)
        if params.think_time_dist == "exponential":
            assert params.think_time_s is not None
            thinks = [float(x) for x in np.random.default_rng((params.seed, step, 3)).exponential(params.think_time_s,
                                                                                                  n * k)]  # fmt: skip
        if self.dataset is not None:
            order = rng.permutation(len(self.dataset))
            items = [self.dataset[order[i % len(order)]] for i in range(n)]
            return [
                [
                    PlannedTurn(
                        self.prefix(step, i) * (t == 0) + text,
                        item.output_tokens or outputs[i * k + t],
                        think_s=thinks[i * k + t],
                    )
                    for t, text in enumerate(item.user_turns[:k])
                ]
                for i, item in enumerate(items)
            ]
        inputs = draw_lengths(params.input_tokens, n * k, rng)
        conversations = []
        for i in range(n):
            turns = []
            for t in range(k):
                tokens = inputs[i * k + t]
                head = self.prefix(step, i) if t == 0 else f"[turn {t + 1}] "
                turns.append(PlannedTurn(head + await self._filler(tokens), outputs[i * k + t], thinks[i * k + t]))
            conversations.append(turns)
        return conversations

    async def _trace_requests(
        self, step: int, inputs: list[int], outputs: list[int], blocks: TraceBlocks
    ) -> list[PlannedRequest]:
        """Each prompt: its trace blocks' texts (the same id, the same text: shared), then its unique rest."""
        hash_ids, block_tokens = blocks
        used = [blocks_used(ids, tokens, block_tokens) for ids, tokens in zip(hash_ids, inputs, strict=True)]
        self._calls_from = self.api.tokenize_calls
        planned = []
        for i, (chain, tokens, out) in enumerate(zip(used, inputs, outputs, strict=True)):
            shared, counted = await self._trace_head(chain, block_tokens)
            if counted >= tokens:  # blocks that count more than their share (their markers, their joins)
                raise ParamsError(f"trace: request {i + 1} of the window: its {len(chain)} blocks count {counted:,} "
                                  f"tokens, its whole input_length of {tokens:,} or more, leaving none for its own "
                                  "rest; choose larger trace_block_tokens")  # fmt: skip
            self._within_tokenize_calls()
            rest = await self._filler(tokens - counted)
            path, body = self._build(shared + self.prefix(step, i) + rest, out)
            planned.append(PlannedRequest(path, body, tokens))
        self.expected_hit_rates[step] = expected_trace_hit_rate(used, inputs, block_tokens, self.block_size)
        return planned

    async def _trace_head(self, used: tuple[int, ...], block_tokens: int) -> tuple[str, int]:
        """The text of a prompt's trace blocks, and its tokens as the server counts them (blocks may join)."""
        if used not in self._heads:
            text = "".join([await self._trace_block(used[: j + 1], block_tokens) for j in range(len(used))])
            counted = await self.api.count_tokens(self.model, text, chat=False) - (self._bare or 0) if used else 0
            self._heads[used] = (text, counted)
        return self._heads[used]

    async def _trace_block(self, chain: tuple[int, ...], block_tokens: int) -> str:
        """The text of a trace block (`chain`: its id and those before it): `block_tokens` tokens, its own words."""
        if chain not in self._blocks:
            self._within_tokenize_calls()
            if self._bare is None:  # what the server counts for an empty text (BOS): not part of a block
                self._bare = await self.api.count_tokens(self.model, "", chat=False)
            head = f"[trace block {chain[-1]} at {len(chain)}, run {self.run_id}] "
            built = await build_prompt(self.api, self.model, block_tokens + self._bare, head, chat=False)
            self._blocks[chain] = built.text + " "  # the next block's words start apart from this one's
        return self._blocks[chain]

    def _within_tokenize_calls(self) -> None:
        """ParamsError once a trace's prompts have taken `MAX_TRACE_TOKENIZE_CALLS` /tokenize calls (before any
        request is sent: a step builds them all first)."""
        if self.api.tokenize_calls - self._calls_from > MAX_TRACE_TOKENIZE_CALLS:
            raise ParamsError(f"trace: building the window's prompts took more than {MAX_TRACE_TOKENIZE_CALLS:,} "
                              "/tokenize calls; choose trace_start_s and trace_duration_s to replay less, or larger "
                              "trace_block_tokens")  # fmt: skip

    async def _shared_prefix_requests(
        self, step: int, inputs: list[int], outputs: list[int], rng: np.random.Generator
    ) -> list[PlannedRequest]:
        """Each prompt: its group's shared prefix, then its unique marker and filler up to its length."""
        params = self.params
        assert params.prefixes is not None and params.prefix_tokens is not None
        groups = prefix_groups(rng, len(inputs), params.prefixes, params.prefix_choice)
        planned = [await self._shared_prefix_request(step, i, group, tokens, out, params.prefix_tokens)
                   for i, (group, tokens, out) in enumerate(zip(groups, inputs, outputs, strict=True))]  # fmt: skip
        self.expected_hit_rates[step] = expected_hit_rate(groups, inputs, params.prefix_tokens, self.block_size)
        return planned

    async def _shared_prefix_request(self, step: int, i: int, group: int, tokens: int, out: int, prefix_tokens: int,
                                     endpoint: Endpoint | None = None, carried: Carried | None = None,
                                     owner: str | None = None) -> PlannedRequest:  # fmt: skip
        """Request `i`: its group's shared prefix (the sweep's, or class `owner`'s), its own marker, then a filler
        up to `tokens` as the server counts them at its endpoint (the sweep's, or `endpoint`)."""
        chat = self.chat if endpoint is None else endpoint == "chat"
        if chat not in self._overhead:
            self._overhead[chat] = await self.api.count_tokens(self.model, "", chat=chat)
        rest = await self._filler(tokens - prefix_tokens + self._overhead[chat], chat)
        text = await self._shared_prefix(step, group, prefix_tokens, chat, owner) + self.prefix(step, i) + rest
        path, body = self._build(text, out, endpoint, carried)
        return PlannedRequest(path, body, tokens)

    async def _shared_prefix(self, step: int, group: int, tokens: int, chat: bool, owner: str | None = None) -> str:
        """Prefix `group` of step `step` (the sweep's, or class `owner`'s own): `tokens` tokens as the server counts
        them (with the chat template when `chat`)."""
        if (owner, step, group) not in self._shared:
            of = f"step {step:03d}" if owner is None else f"class {owner} step {step:03d}"
            head = f"[shared prefix {group:05d} of {of}, run {self.run_id}] "
            built = await build_prompt(self.api, self.model, tokens, head, chat=chat)
            self._shared[(owner, step, group)] = built.text
        return self._shared[(owner, step, group)]

    async def _filler(self, tokens: int, chat: bool | None = None) -> str:
        """The text after a prefix that makes a prompt of `tokens` as the server counts it (with the chat template
        when `chat`; default: the sweep's endpoint's)."""
        chat = self.chat if chat is None else chat
        if (tokens, chat) not in self._fillers:
            like = self.prefix(0, 0)  # every prefix has this shape: the same digits' widths
            built = await build_prompt(self.api, self.model, tokens, like, chat=chat)
            self._fillers[(tokens, chat)] = built.text.removeprefix(like)
        return self._fillers[(tokens, chat)]

    async def _from_item(self, step: int, i: int, item: DatasetItem, drawn: int, endpoint: Endpoint | None = None,
                         carried: Carried | None = None) -> PlannedRequest:  # fmt: skip
        """Request `i` from a dataset's item: its own prefix, then the item's prompt or chat; its output length the
        item's, its reference reply's, else the one `drawn`."""
        out = item.output_tokens or (await self._reply_length(item) if item.reply is not None else drawn)
        text = item.prompt if item.prompt is not None else ""
        path, body = self._build(self.prefix(step, i) + text, out, endpoint, carried)
        if item.messages is not None:
            body["messages"] = _with_prefix(list(item.messages), self.prefix(step, i))
        return PlannedRequest(path, body, None)

    async def _reply_length(self, item: DatasetItem) -> int:
        assert item.reply is not None
        if item.where not in self._reply_tokens:
            self._reply_tokens[item.where] = max(1, await self.api.count_tokens(self.model, item.reply, chat=False))
        return self._reply_tokens[item.where]


@dataclass(frozen=True)
class Carried:
    """What a request carries beyond its text, read once: its response format, tools and tool choice as sent, and
    how many images of what size."""

    response_format: dict[str, Any] | None
    tools: list[dict[str, Any]] | None
    tool_choice: str | dict[str, Any] | None
    images: int
    image_size: tuple[int, int]

    @classmethod
    def of(cls, kinds: RequestKinds) -> Carried:
        return cls(kinds.request_format(), *kinds.request_tools(), kinds.images, kinds.image_dimensions())


def _chat_item(items: list[DatasetItem]) -> DatasetItem | None:
    """The first item holding chat messages (None: none does)."""
    return next((i for i in items if i.messages), None)


def _with_prefix(messages: list[dict[str, Any]], prefix: str) -> list[dict[str, Any]]:
    """The chat with `prefix` before the first message's text (a system or user turn: where the cache starts)."""
    first = dict(messages[0])
    first["content"] = prefix + first["content"]
    return [first, *messages[1:]]
