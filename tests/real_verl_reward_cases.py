"""The shared case set for rule-based rewards: (data_source, response, ground_truth) triples that
tests/real_verl/test_rewards_real_verl.py scores with real verl's `default_compute_score` (through
tests/real_verl_oracle.py) and with our `by_data_source` reward.

The cases are generated, not sampled: each family crosses answer spellings with the ways a response
can carry them, aimed at where a scorer's rules decide (the 300-character clip, the first or last
marker, `####0`, `#### $0`, fullwidth digits, commas, leading zeros, `0.`, `.5`, `\\fbox`,
`\\boxed 7`, nested braces, `\\text{}`, `%`, units, `\\sqrt3`, fractions, `Answer:` lines,
`[INVALID]`, several boxes, empty, very long and non-ASCII responses; LaTeX macros for geo3k), plus
seeded random strings of the tokens the rules look at.

    cases = reward_cases()      # a list of dicts: data_source, response, ground_truth
"""

from itertools import product

FILLER = "Let me work through this step by step, checking each part of the computation. "  # 81 characters
REASONING = "First, 12 + 30 = 42. Then 42 * 2 = 84, and 84 - 12 = 72.\n"  # numbers before the answer


def _spread(*variants: str) -> list[str]:
    return list(dict.fromkeys(variants))  # keeps order, drops repeats


def _crossed(sources: list, truths: list, answers, forms: list) -> list[dict]:
    """Every truth's answer spellings (answers(truth)) in every form, after REASONING; the data sources
    taken in turn."""
    cases = []
    for t in truths:
        for a, form in product(answers(t), forms):
            cases.append(dict(data_source=sources[len(cases) % len(sources)], response=REASONING + form.format(a=a),
                              ground_truth=t))
    return cases


# ---------------------------------------------------------------------------- openai/gsm8k

GSM8K_TRUTHS = ["72", "0", "1000", "1000000", "-3", "0.5", "18", "5"]


def _gsm8k_answers(t: str) -> list[str]:
    fullwidth = t.translate(str.maketrans("0123456789-", "０１２３４５６７８９－"))
    n = t.lstrip("-")
    sign = "-" if t.startswith("-") else ""
    with_commas = sign + f"{int(float(n)):,}" if "." not in n else t
    return _spread(t, t + ".", "0" + t if not sign else sign + "0" + n, t + ".0", with_commas, fullwidth,
                   sign + "\u2212" + n if not sign else "\u2212" + n, str(int(float(t)) + 1), t + "1",
                   "." + n.split(".")[-1] if "." in n else n + ".", "$" + t, t + ",", "1000001" if t != "1000001" else t)


GSM8K_FORMS = [
    "#### {a}", "####{a}", "#### ${a}", "####  {a}", "#### {a}.", "#### {a} dollars", "The answer is {a}.",
    "\\boxed{{{a}}}", "#### {a}\n", "**#### {a}**", "#### {a}\n#### 99", "#### 99\n#### {a}",
]


def gsm8k_cases() -> list[dict]:
    cases = _crossed(["openai/gsm8k"], GSM8K_TRUTHS, _gsm8k_answers, GSM8K_FORMS)
    # where the 300-character clip falls: the answer early in a long response, or just inside the tail
    for t, (before, after) in product(["72", "5"], [(0, 400), (0, 290), (0, 200), (4, 0), (4, 1), (4, 4)]):
        cases.append(dict(data_source="openai/gsm8k", response=FILLER * before + f"#### {t}" + "x" * after,
                          ground_truth=t))
    for k in range(288, 299):  # '#### 72' then k characters: inside the 300-character tail up to k = 293
        cases.append(dict(data_source="openai/gsm8k", response=FILLER + "#### 72" + "." * k, ground_truth="72"))
    for first, last in [("72", "5"), ("5", "72")]:  # two markers far apart: the first is out of the tail
        cases.append(dict(data_source="openai/gsm8k", response=f"#### {first}\n" + FILLER * 5 + f"#### {last}",
                          ground_truth="72"))
    for response in ["", "####", "#### ", "#### -", "#### .", "#### ,", "####\n72", "# ### 72", "##### 72",
                     "#### 7 2", "#### 72 #### ", "#### 7,2", "#### 72e3", "#### 1e3", "#### ٧٢", "#### 72%",
                     "#### -0", "#### 00", "#### 0.", "#### .0", "x" * 10000 + "#### 72", "#### 72" + "é" * 295,
                     "#### 72\u3002", "答案是 #### 72", "#### 72 🎉", "####\t72", "#### +72"]:
        for t in ["72", "0"]:
            cases.append(dict(data_source="openai/gsm8k", response=response, ground_truth=t))
    return cases


# ---------------------------------------------------------------------------- MATH (\boxed{})

MATH_SOURCES = ["lighteval/MATH", "DigitalLearningGmbH/MATH-lighteval", "HuggingFaceH4/MATH-500"]
MATH_TRUTHS = ["5", "\\frac{1}{2}", "\\sqrt{3}", "3.5", "10", "1000", "1000000", "\\text{(B)}", "(1,2)", "x^2+1",
               "\\pi", "2\\sqrt{2}", "-7", "\\frac{7}{2}", "0.5", "90^\\circ", "\\{1,2\\}"]


def _math_answers(t: str) -> list[str]:
    more = {
        "5": ["5.", "5.0", "05", "\\text{5}", "x = 5", "x=5", "5 \\text{ cm}", "5\\text{ cm}", "{5}", " 5 ", "\\!5",
              "\\left(5\\right)", "\\mathrm{5}", "5^\\circ", "5\\%", "7"],
        "10": ["10\\%", "10%", "10 \\%", "10\\text{ percent}", "10^{\\circ}", "\\$10", "$10$", "10.00"],
        "1000": ["1,000", "1{,}000", "1\\,000", "1000.", "10^3", "1000001"],
        "1000000": ["1000001", "1,000,000", "1000000.0", "10^6"],
        "3.5": ["7/2", "\\frac{7}{2}", "3.50", "3.5.", "\\frac72"],
        "\\frac{7}{2}": ["7/2", "\\frac72", "\\dfrac{7}{2}", "\\tfrac72", "3.5", "\\frac{7}{ 2}", "\\frac 72"],
        "\\frac{1}{2}": ["\\frac12", "\\dfrac{1}{2}", "1/2", "0.5", ".5", "\\frac{2}{4}", "\\frac1{2}", "\\left(\\frac12\\right)"],
        "0.5": [".5", "\\frac12", "1/2", "0.50", "{.5}", " .5"],
        "\\sqrt{3}": ["\\sqrt3", "\\sqrt {3}", "\\sqrt{3} \\text{ units}", "3^{1/2}", "sqrt(3)"],
        "2\\sqrt{2}": ["2\\sqrt2", "\\sqrt{8}", "2 \\sqrt{2}"],
        "\\text{(B)}": ["(B)", "B", "\\text{(B)}", "\\textbf{(B)}", "\\text{ (B)}"],
        "(1,2)": ["(1, 2)", "\\left(1,2\\right)", "(2,1)", "[1,2]"],
        "x^2+1": ["x^2 + 1", "1+x^2", "y=x^2+1", "f(x)=x^2+1"],
        "\\pi": ["\\pi ", "3.14159", "π"],
        "-7": ["- 7", "−7", "-7.", "7"],
        "90^\\circ": ["90", "90^{\\circ}", "90^\\circ", "90 degrees"],
        "\\{1,2\\}": ["\\{1, 2\\}", "1,2", "\\{2,1\\}"],
    }
    return _spread(t, *more.get(t, []))


MATH_FORMS = [
    "\\boxed{{{a}}}", "so the answer is $\\boxed{{{a}}}$.", "\\boxed {{{a}}}", "\\boxed {a}", "\\boxed {a}$ done.",
    "\\fbox{{{a}}}", "\\boxed{{9}} then \\boxed{{{a}}}", "\\boxed{{{a}}} then \\boxed{{9}}", "\\boxed{{{a}",
    "The answer is {a}.", "\\boxed{{{a}}} and \\boxed 9", "\\fbox{{9}} \\boxed{{{a}}}",
]


def math_cases() -> list[dict]:
    cases = _crossed(MATH_SOURCES, MATH_TRUTHS, _math_answers, MATH_FORMS)
    for response, t in [("\\boxed 7", "5"), ("\\boxed 5", "5"), ("\\boxed{5}", "5"), ("\\boxed7", "7"),
                        ("\\boxed{\\frac{1}{\\sqrt{2}}}", "\\frac{1}{\\sqrt{2}}"), ("\\boxed{{5}}", "5"),
                        ("\\boxed{\\text{5}}", "5"), ("", "5"), ("\\boxed{}", ""), ("\\boxed{ }", ""),
                        ("x" * 10000 + "\\boxed{5}", "5"), ("\\boxed{5}" + "x" * 10000, "5"),
                        ("\\boxed{５}", "5"), ("\\boxed{a}", "A"), ("\\boxed{5 \\text{ cm}^2}", "5"),
                        ("\\boxed{5\\text{ apples and }3}", "5"), ("\\boxed{\\$5}", "5"), ("\\boxed{5\\%}", "5"),
                        ("\\fbox{5} and \\boxed{6}", "6"), ("\\fbox 5", "5"), ("\\boxed{1/0}", "1/0"),
                        ("\\boxed{k = 5}", "5"), ("\\boxed{abc = 5}", "5"), ("\\boxed{x=y=5}", "5"),
                        ("\\boxed{\\\\frac{1}{2}}", "\\frac{1}{2}"), ("\\boxed{\\frac}", "\\frac"),
                        ("\\boxed{\\sqrt}", "\\sqrt"), ("\\boxed{5\\text{ a }\\text{ b}}", "5"),
                        ("\\boxed{\n5\n}", "5"), ("\\boxed{5}\\boxed{6}", "5"), ("$\\boxed 5$", "5"),
                        ("\\boxed 5 and \\boxed{6}", "6"), ("\\boxed{6} and \\boxed 5", "5")]:
        for source in MATH_SOURCES:
            cases.append(dict(data_source=source, response=response, ground_truth=t))
    return cases


# ---------------------------------------------------------------------------- DAPO-Math (Answer: ...)

DAPO_SOURCES = ["math_dapo", "math", "math_dapo_reasoning", "aime2024", "aime_2025", "aime"]
DAPO_TRUTHS = ["13", "1000", "\\frac{1}{2}", "34", "-2", "\\sqrt{2}", "5", "\\text{B}", "1000000"]


def _dapo_answers(t: str) -> list[str]:
    more = {
        "13": ["13.", "$13$", "x = 13", "13 dollars", "\\boxed{13}", "\\text{13}", "013", "13 \\text{ units}", "14",
               "13 degrees", "13^\\circ", "$13$.", "thirteen", "a 13"],
        "1000": ["1,000", "$1,000$", "1000.0", "1{,}000", "1 000"],
        "1000000": ["1000001", "1,000,000"],
        "\\frac{1}{2}": ["\\frac12", "\\dfrac{1}{2}", "1/2", "0.5", "$\\frac{1}{2}$"],
        "34": ["34 cm", "34 students", "\\textbf{34}", "\\overline{34}"],
        "-2": ["- 2", "−2", "-2 points"],
        "\\sqrt{2}": ["\\sqrt2", "sqrt2", "\\sqrt{2}."],
        "\\text{B}": ["B", "\\textbf{B}", "(B)"],
    }
    return _spread(t, *more.get(t, []))


DAPO_FORMS = [
    "Answer: {a}", "answer: {a}", "ANSWER : {a}", "Answer:{a}\nThat is all.", "Answer: 9\nAnswer: {a}",
    "Answer: {a}\nAnswer: 9", "\\boxed{{{a}}}", "\\boxed {a}", "\\fbox{{{a}}}", "Answer: [INVALID]\n\\boxed{{{a}}}",
    "\\boxed{{{a}}}" + "." * 120, "The final answer is {a}", "\\boxed{{9}} \\boxed{{{a}}}",
    "\\boxed{{{a}}} \\boxed 9", "\\boxed{{{a}}} \\fbox{{9}}",
]


def dapo_cases() -> list[dict]:
    cases = _crossed(DAPO_SOURCES, DAPO_TRUTHS, _dapo_answers, DAPO_FORMS)
    for before, after in [(0, 0), (0, 280), (0, 320), (10, 0), (3, 0)]:  # the 300-character clip
        for form in ["Answer: 13", "\\boxed{13}"]:
            cases.append(dict(data_source="math_dapo", response=FILLER * before + form + "x" * after,
                              ground_truth="13"))
    for k in range(86, 95):  # a box then k characters: within the last 100 up to k = 90
        cases.append(dict(data_source="math_dapo", response=FILLER + "\\boxed{13}" + "." * k, ground_truth="13"))
    for k in range(285, 294):  # an Answer line then k characters: within the last 300 up to k = 289
        cases.append(dict(data_source="math_dapo", response=FILLER + "Answer: 13\n" + "." * k, ground_truth="13"))
    for response in ["", "Answer:", "Answer: ", "Answer: [INVALID]", "\\boxed{}", "Answer: 13" + "\n" * 5,
                     "x" * 10000 + "Answer: 13", "Answer: 13 🎉", "答案 Answer: 13", "Answer: １３", "Answer: 1 3",
                     "Answer: 13\r\n", "Answer: $13", "Answer: 13$", "Answer: \\boxed{13", "Answer: =13",
                     "Answer: 6+7=13", "answer: an 13", "Answer: a13", "Answer is 13", "Final Answer: 13"]:
        for source, t in product(["math_dapo", "aime2024"], ["13", "[INVALID]"]):
            cases.append(dict(data_source=source, response=response, ground_truth=t))
    return cases


# ---------------------------------------------------------------------------- hiyouga/geometry3k

GEO_TRUTHS = ["3", "\\frac{1}{2}", "2\\sqrt{3}", "60", "12.5"]
GEO_ANSWERS = {"3": ["3", "3.0", "03", "4", "\\text{3}", "x = 3"], "\\frac{1}{2}": ["0.5", "1/2", "\\frac{2}{4}", ".5"],
               "2\\sqrt{3}": ["2\\sqrt3", "\\sqrt{12}", "3.464"], "60": ["60^\\circ", "60 degrees", "60.0", "1,000"],
               "12.5": ["25/2", "\\frac{25}{2}", "12.50", "12,5"]}
GEO_MACROS = ["mid", "vert", "lvert", "angle", "triangle", "circ", "pm", "leq", "neq", "approx", "div", "cdots", "perp",
              "parallel", "cong", "to", "in", "cap", "emptyset", "prime", "infty", "cdot", "times", "alpha", "theta",
              "lambda", "xi", "varphi", "Delta", "Lambda", "sin", "cos", "tan", "arctan", "log", "ln", "exp", "max",
              "lim", "hat", "bar", "vec", "overline", "mathbf", "mathrm", "mathbb", "operatorname", "displaystyle",
              "quad", "lbrace", "langle", "lfloor", "%", "$", "{", ",", ";", "!"]
GEO_FORMS = ["<think>reasoning</think> \\boxed{{{a}}}", "\\boxed{{{a}}}", "<think>a</think>\\boxed{{{a}}} done",
             "<think>a</think> no box {a}", "<think>a</think>\\boxed {a}", "<think>a</think>\\fbox{{{a}}}"]


def geo3k_cases() -> list[dict]:
    cases = []
    for t in GEO_TRUTHS:
        for a, form in product(_spread(t, *GEO_ANSWERS[t]), GEO_FORMS):
            cases.append(dict(data_source="hiyouga/geometry3k", response=form.format(a=a), ground_truth=t))
    # where the MATH normalizer gives up (a bare \frac or \sqrt, two '\text{ ' units) or drops '%'
    for answer, t in [("a = \\frac", "\\frac"), ("x=\\frac", "x = \\frac"), ("ab = 5\\sqrt", "5\\sqrt"),
                      ("5 \\sqrt", "5\\sqrt"), ("5 \\text{ cm} \\text{ m}", "5"), ("5 \\text{ cm}", "5"),
                      ("50%", "50"), ("50\\%", "50"), ("\\text{ 5}", "5"), ("\\text{x = 5}", "5"), (".5 \\frac", "0.5")]:
        for form in ["<think>a</think>\\boxed{{{a}}}", "\\boxed{{{a}}}"]:
            cases.append(dict(data_source="hiyouga/geometry3k", response=form.format(a=answer), ground_truth=t))
    # LaTeX macros as text (mathruler renders them with pylatexenc): a symbol, a function name, an accent
    for name, t in product(GEO_MACROS, ["3", "\\sin 3", "\\{3\\}"]):
        cases.append(dict(data_source="hiyouga/geometry3k", response=f"\\boxed{{\\{name} 3}}", ground_truth=t))
    for answer, t in product(["\\mid3\\mid", "|3|", "\\lvert 3 \\rvert", "\\left|3\\right|", "2\\lambda", "\\sin 30",
                              "\\log_2 8", "\\{1,2\\}", "\\angle ABC", "\\overline{AB}", "\\mathbf{3}", "3!"],
                             ["3", "2", "\\{1,2\\}", "\\frac{1}{2}", "AB"]):
        cases.append(dict(data_source="hiyouga/geometry3k", response=f"\\boxed{{{answer}}}", ground_truth=t))
    return cases


# ---------------------------------------------------------------------------- searchR1_* (<answer>)

SEARCH_SOURCES = ["searchR1_nq", "searchR1_triviaqa", "searchR1_popqa", "searchR1_hotpotqa",
                  "searchR1_2wikimultihopqa", "searchR1_musique", "searchR1_bamboogle"]
SEARCH_TARGETS = [["Paris"], ["The Beatles", "Beatles"], ["1969"], ["New York City", "NYC"]]


def search_cases() -> list[dict]:
    cases = []
    k = 0
    for targets in SEARCH_TARGETS:
        t = targets[0]
        for answer in _spread(t, t.lower(), t.upper(), f" {t}. ", f"the {t}", f"{t}!", f"an {t}", t + " France",
                              t.replace(" ", "")):
            for form in ["<answer>{a}</answer>", "<think>x</think><answer>{a}</answer>", "{a}",
                         "<answer>wrong</answer> <answer>{a}</answer>", "<answer>{a}</answer><answer>wrong</answer>",
                         "<answer>\n{a}\n</answer>", "<answer>{a}</answer>" * 11, "<answer>{a}"]:
                source = SEARCH_SOURCES[k % len(SEARCH_SOURCES)]
                k += 1
                cases.append(dict(data_source=source, response=form.format(a=answer),
                                  ground_truth={"target": list(targets)}))
    cases.append(dict(data_source="searchR1_nq", response="<answer>Paris</answer>", ground_truth={"target": "Paris"}))
    return cases


# ---------------------------------------------------------------------------- routing

def routing_cases() -> list[dict]:
    """Names real verl routes by exact match or by prefix, and names it does not know (it raises)."""
    names = ["openai/gsm8k ", "OpenAI/gsm8k", "gsm8k", "openai/gsm8k_v2", "lighteval/math", "MATH-500", "aime",
             "aime24", "AIME2024", "aimeX", "math_dapo_v2", "mathematics", "hiyouga/geometry3k_v2",
             "searchR1_unknown", "codecontests_x", "my_dataset", "", "numina_other"]
    responses = ["#### 5", "\\boxed{5}", "Answer: 5", "<think>a</think>\\boxed{5}", "<answer>5</answer>"]
    return [dict(data_source=n, response=r, ground_truth="5") for n, r in product(names, responses)]


# ---------------------------------------------------------------------------- random token strings

TOKENS = ["\\boxed", "\\boxed{", "\\boxed ", "{", "}", " ", "$", "\\fbox{", "5", "7", "12", ".", ",", "#### ", "####",
          "Answer:", "answer: ", "\n", "\\frac", "\\frac{", "\\sqrt", "\\text{", "\\text{ ", "=", "%", "\\%", "\\\\", "-",
          "x", "dollars", "\\left(", "\\right)", "(", ")", "<answer>", "</answer>", "the ", "Paris", "a ", "an ",
          "[INVALID]", "\\dfrac", "^\\circ", "\\!", "0", "\\$", "\\mbox{", "\\textbf{", "\\overline{", "frac", "sqrt",
          "units", "{,}", '"', "１", "é", "\t", ",\\!", "AB", "<think>", "</think>", "\\pi", "\\sin", "/", "\\{", " and "]
RANDOM_SOURCES = ["openai/gsm8k", "lighteval/MATH", "math_dapo", "aime25", "searchR1_nq", "hiyouga/geometry3k"]
RANDOM_TRUTHS = ["5", "7", "12", "\\frac{5}{7}", "5.", "\\text{5}", "5%", "0.5", "Paris", "[INVALID]", "", "\\sqrt{5}", "x=5"]


def random_cases(n: int = 1500, seed: int = 0) -> list[dict]:
    """Strings of the tokens the rules look at, in random order (seeded): the combinations no one
    writes by hand."""
    import random

    rng = random.Random(seed)

    def text(most: int) -> str:
        return "".join(rng.choice(TOKENS) for _ in range(rng.randint(0, most)))

    cases = []
    for _ in range(n):
        source = rng.choice(RANDOM_SOURCES)
        truth = rng.choice(RANDOM_TRUTHS) if rng.random() < 0.7 else text(4)
        cases.append(dict(data_source=source, response=text(rng.choice([6, 15, 40])),
                          ground_truth={"target": [truth]} if source.startswith("searchR1") else truth))
    return cases


def reward_cases() -> list[dict]:
    return (gsm8k_cases() + math_cases() + dapo_cases() + geo3k_cases() + search_cases() + routing_cases()
            + random_cases())


if __name__ == "__main__":
    from collections import Counter

    cases = reward_cases()
    print(len(cases), Counter(c["data_source"] for c in cases).most_common())
