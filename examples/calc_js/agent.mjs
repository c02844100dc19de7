// The calc agent of examples/calc (agent.py's solve()) as a program in JavaScript: Node 20, no
// packages. fulmen runs it once per rollout with the task in $FULMEN_TASK_FILE and its model
// endpoint in $OPENAI_BASE_URL; it prints the model's final turn ("ANSWER: n"), which
// calc_js_reward.py scores. The protocol, byte for byte the Python agent's:
//
//   1. ask with the calc prompt's messages (max_tokens 24, stop at a newline);
//   2. evaluate the first CALC(expression) of the reply (no CALC: print nothing, exit 0);
//   3. ask again with that turn and "RESULT: value" appended; print the reply.
//
// A failed model call exits with status 1 and says why on stderr.
//
// Where it may differ from Python: integers beyond 2**53 (Python's are exact, these are
// doubles), and an expression holding a character that is neither a number nor an operator
// ("x * 2", "it's 2") is always "unsupported syntax", where Python calls some of them "not an
// arithmetic expression" (those it cannot parse at all).
//
//   node agent.mjs --print-messages "question"   the first call's messages, as JSON
//   node agent.mjs --calculator TEXT...         calculator(TEXT) for each, as a JSON list
import { readFileSync } from "node:fs";

const MAX_TOKENS = 24;

// CALC_PROMPT of examples/calc/agent.py; tests/examples/test_calc_js.py checks that
// messages() renders exactly what CALC_PROMPT.messages(question=...) does.
const INSTRUCTIONS =
  "Solve the word problem. First write CALC(expression) with the arithmetic to compute. " +
  "You will get RESULT: value. Then write ANSWER: number.";
const DEMOS = [
  ["Ann has 12 stickers and gets 5 more. How many stickers does Ann have?", "12 + 5", "17"],
  ["A box holds 6 rows of 4 eggs, and 3 eggs break. How many eggs are left?", "6 * 4 - 3", "21"],
  ["There are 7 red and 8 blue cars, each with 4 wheels. How many wheels?", "(7 + 8) * 4", "60"],
];

/** The first call's messages: the instructions open the first user turn, then each worked
 * example as turns, then the question. */
export function messages(question) {
  const out = [];
  let prefix = `${INSTRUCTIONS}\n`;
  for (const [demoQuestion, expression, answer] of DEMOS) {
    out.push({ role: "user", content: `${prefix}Question: ${demoQuestion}` });
    prefix = "";
    out.push({ role: "assistant", content: `CALC(${expression})` });
    out.push({ role: "user", content: `RESULT: ${answer}` });
    out.push({ role: "assistant", content: `ANSWER: ${answer}` });
  }
  out.push({ role: "user", content: `${prefix}Question: ${question}` });
  return out;
}

// --- the calculator: calculator() and tasks.py's evaluate_expression() -----------------------

const CALC = /CALC\(([^()]*(?:\([^()]*\)[^()]*)*)\)/; // agent.py's _CALC, same semantics

class CalcError extends Error {}

/** Python's repr() of a string, as evaluate_expression's messages quote the expression. */
function pyRepr(text) {
  const quote = text.includes("'") && !text.includes('"') ? '"' : "'";
  let out = quote;
  for (const char of text) {
    const code = char.codePointAt(0);
    if (char === "\\" || char === quote) out += `\\${char}`;
    else if (char === "\n") out += "\\n";
    else if (char === "\r") out += "\\r";
    else if (char === "\t") out += "\\t";
    else if (code < 0x20 || code === 0x7f) out += `\\x${code.toString(16).padStart(2, "0")}`;
    else out += char;
  }
  return out + quote;
}

// A number as Python writes one, an operator (or a stray "."), or any other character.
const NUMBER = String.raw`\d[\d_]*(?:\.[\d_]*)?(?:[eE][+-]?\d+)?|\.\d[\d_]*(?:[eE][+-]?\d+)?`;
const TOKEN = new RegExp(String.raw`\s*(?:(${NUMBER})|(\*\*|\/\/|[-+*/().])|(\S))`, "y");

function tokenize(expression) {
  const tokens = [];
  let foreign = false; // a character Python may parse but the calculator refuses (x, %, ...)
  TOKEN.lastIndex = 0;
  for (let match; TOKEN.lastIndex < expression.length && (match = TOKEN.exec(expression)); ) {
    if (match[1] !== undefined) tokens.push({ number: match[1] });
    else if (match[2] !== undefined) tokens.push({ op: match[2] });
    else if (match[3] !== undefined) foreign = true;
  }
  return { tokens, foreign };
}

/** A Python number literal's value; null when Python would not parse it ("05", "1__0"). */
function literal(text) {
  if (/__|_$|_\.|\._|_[eE]/.test(text)) return null;
  const plain = text.replaceAll("_", "");
  if (/^0+[1-9]\d*$/.test(plain)) return null; // leading zeros: a SyntaxError in Python
  return Number(plain);
}

/** Parse with Python's grammar for these operators; a broken structure is a syntax error. */
function parse(tokens, syntaxError) {
  let position = 0;
  const peek = () => tokens[position]?.op;
  // sum := product (("+" | "-") product)*;  product := unary (("*" | "/" | "//") unary)*
  // unary := ("-" | "+") unary | power;  power := atom ("**" unary)?
  // atom := number | "(" sum ")"
  function sum() {
    let node = product();
    while (peek() === "+" || peek() === "-") {
      node = { op: tokens[position++].op, left: node, right: product() };
    }
    return node;
  }
  function product() {
    let node = unary();
    while (["*", "/", "//"].includes(peek())) {
      node = { op: tokens[position++].op, left: node, right: unary() };
    }
    return node;
  }
  function unary() {
    if (peek() === "-" || peek() === "+") {
      return { op: `unary${tokens[position++].op}`, operand: unary() };
    }
    const node = atom();
    return peek() === "**" ? { op: tokens[position++].op, left: node, right: unary() } : node;
  }
  function atom() {
    const token = tokens[position++];
    if (token?.op === "(") {
      const node = sum();
      if (tokens[position++]?.op !== ")") throw syntaxError();
      return node;
    }
    const value = token?.number === undefined ? null : literal(token.number);
    if (value === null) throw syntaxError();
    return { value };
  }
  const tree = sum();
  if (position !== tokens.length) throw syntaxError();
  return tree;
}

/** evaluate_expression(): + - * / and parentheses over numbers, else a CalcError. */
export function evaluate(expression) {
  const quoted = pyRepr(expression);
  const { tokens, foreign } = tokenize(expression);
  // A character outside numbers and operators (a name, %, ...): Python may parse it, but
  // evaluate_expression never evaluates it.
  if (foreign) throw new CalcError(`unsupported syntax in ${quoted}`);
  const tree = parse(tokens, () => new CalcError(`not an arithmetic expression: ${quoted}`));
  // Walked as evaluate_expression walks Python's syntax tree: an operator it does not know
  // (unary +, **, //) is refused before its operands are evaluated.
  function walk(node) {
    if (node.value !== undefined) return node.value;
    if (node.op === "unary-") return -walk(node.operand);
    if (!["+", "-", "*", "/"].includes(node.op)) {
      throw new CalcError(`unsupported syntax in ${quoted}`);
    }
    const left = walk(node.left);
    const right = walk(node.right);
    if (node.op === "+") return left + right;
    if (node.op === "-") return left - right;
    if (node.op === "*") return left * right;
    if (right === 0) throw new CalcError(`division by zero in ${quoted}`);
    return left / right;
  }
  return walk(tree);
}

/** Python's f"{value:.4g}" for a float: 4 significant digits, rounded half to even. */
function formatG4(value) {
  if (Number.isNaN(value)) return "nan";
  if (!Number.isFinite(value)) return value < 0 ? "-inf" : "inf";
  if (value === 0) return Object.is(value, -0) ? "-0" : "0";
  const [mantissa, exponentText] = Math.abs(value).toExponential(99).split("e");
  const digits = mantissa.replace(".", ""); // 100 significant digits of the exact value
  let exponent = Number(exponentText);
  let kept = BigInt(digits.slice(0, 4));
  const rest = digits.slice(4);
  const half = `5${"0".repeat(rest.length - 1)}`;
  if (rest > half || (rest === half && kept % 2n === 1n)) kept += 1n;
  let shown = kept.toString();
  if (shown.length > 4) {
    shown = shown.slice(0, 4);
    exponent += 1;
  }
  const sign = value < 0 ? "-" : "";
  if (exponent >= -4 && exponent < 4) {
    const padded = exponent < 0 ? "0".repeat(-exponent) + shown : shown;
    const point = exponent < 0 ? 1 : exponent + 1;
    const text = `${padded.slice(0, point)}.${padded.slice(point)}`;
    return sign + text.replace(/0+$/, "").replace(/\.$/, "");
  }
  const fraction = shown.slice(1).replace(/0+$/, "");
  const power = `${exponent < 0 ? "-" : "+"}${String(Math.abs(exponent)).padStart(2, "0")}`;
  return `${sign}${shown[0]}${fraction ? `.${fraction}` : ""}e${power}`;
}

/** calculator(): the first CALC(...) in text evaluated; null when there is none. */
export function calculator(text) {
  const match = CALC.exec(text);
  if (match === null) return null;
  let value;
  try {
    value = evaluate(match[1]);
  } catch (error) {
    if (error instanceof CalcError) return `error: ${error.message}`;
    throw error;
  }
  return Number.isInteger(value) ? BigInt(value).toString() : formatG4(value);
}

// --- the model calls ---------------------------------------------------------------------------

const RETRIED = new Set([408, 409, 429]); // and 5xx: what the openai client retries, twice

async function complete(chat) {
  const body = JSON.stringify({
    model: process.env.FULMEN_MODEL,
    messages: chat,
    max_tokens: MAX_TOKENS,
    stop: ["\n"],
  });
  for (let attempt = 0; ; attempt++) {
    let failure;
    try {
      const response = await fetch(`${process.env.OPENAI_BASE_URL}/chat/completions`, {
        method: "POST",
        headers: {
          "content-type": "application/json",
          authorization: `Bearer ${process.env.OPENAI_API_KEY}`,
        },
        body,
      });
      if (response.ok) {
        const reply = await response.json();
        return reply.choices[0].message.content ?? "";
      }
      failure = `status ${response.status}: ${(await response.text()).slice(0, 2000)}`;
      if (!RETRIED.has(response.status) && response.status < 500) attempt = Infinity;
    } catch (error) {
      failure = `${error.message}${error.cause ? ` (${error.cause.message ?? error.cause})` : ""}`;
    }
    if (attempt >= 2) throw new Error(`model call failed: ${failure}`);
    await new Promise((resolve) => setTimeout(resolve, 500 * 2 ** attempt));
  }
}

async function solve(question) {
  const chat = messages(question);
  const callText = await complete(chat);
  const result = calculator(callText);
  if (result === null) {
    console.error(`no CALC(...) in the model's first turn: ${JSON.stringify(callText)}`);
    return;
  }
  chat.push(
    { role: "assistant", content: callText },
    { role: "user", content: `RESULT: ${result}` },
  );
  console.log(await complete(chat));
}

const [flag, ...rest] = process.argv.slice(2);
if (flag === "--print-messages") {
  console.log(JSON.stringify(messages(rest[0])));
} else if (flag === "--calculator") {
  console.log(JSON.stringify(rest.map(calculator)));
} else {
  const task = JSON.parse(readFileSync(process.env.FULMEN_TASK_FILE, "utf8"));
  try {
    await solve(task.question);
  } catch (error) {
    console.error(error.message);
    process.exit(1);
  }
}
