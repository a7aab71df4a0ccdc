#!/usr/bin/env python
"""Write sweet/colbench/data/backend_lite.jsonl: the `bundled:lite` backend tier.

Each task is a small stdlib-only function whose description leaves one or two concrete values open (a rate, a
threshold, a cap, a marker string...) that the reference fixes. The tier is built from templates (one per kind of
function, in `TEMPLATES`) crossed with hand-written domain "skins" (five per template: a story, names, units and the
value ranges that make sense there); every value is drawn with a seeded RNG, so the file is reproducible:

    .venv/bin/python scripts/make_lite_tier.py            # rewrite the bundled file
    .venv/bin/python scripts/make_lite_tier.py --check    # exit 1 if the bundled file differs from a fresh build
    .venv/bin/python scripts/validate_lite.py             # then check it in the sandbox

Per record, beside the official fields (`problem_description`, `ground_truth`, `test_cases`) and `task_id` / `split`:
`decisions` (each hidden value stated in plain words, the way the user would say it), `decision_values` (the literal of
the reference each decision names), `questions` (one scripted question per decision, for the simulator-accuracy
check), `guesses` (2-3 plausible wrong versions of the reference: a value left at a common default, a rule left out),
`template` and `domain` (for auditing). Nothing here executes task code: the validator does, in the sandbox.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "sweet" / "colbench" / "data" / "backend_lite.jsonl"
SIG = "The signature of the function is: "
SEED = 20261201
N_TEST = 50


# ---------------------------------------------------------------------------------------------------- formatting
def money(v) -> str:
    return f"${int(v)}" if float(v).is_integer() else f"${v:.2f}"


def pct(v) -> str:
    return f"{v * 100:g}%"


def lit(v) -> str:
    return repr(v)


def pick(r: random.Random, options, avoid=()):
    opts = [o for o in options if o not in avoid]
    if not opts:
        raise ValueError(f"no option left in {options} after avoiding {avoid}")
    return r.choice(opts)


def an(word: str) -> str:
    """'a' or 'an' before `word`, capitalised like a sentence start."""
    return ("An " if word[0].lower() in "aeiou" else "A ") + word


# Punctuation is named in the decisions as well as quoted: a small simulator repeats "a hyphen" more reliably than
# a bare '-' (it tends to say "a mark").
MARK_NAMES = {".": "a dot", "_": "an underscore", "-": "a hyphen", "/": "a slash", "+": "a plus sign",
              "~": "a tilde", "#": "a hash sign", "?": "a question mark", "..": "two dots",
              ">>": "two greater-than signs", "x": "a lower-case letter x", "X": "a capital letter X"}


def named(v: str) -> str:
    return f"{MARK_NAMES[v]} ({v!r})" if v in MARK_NAMES else repr(v)


def ordinal(k: int) -> str:
    return f"{k}{'th' if 10 <= k % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(k % 10, 'th')}"


def fill(base: str, n: int) -> str:
    """A string of exactly n characters made by repeating `base`."""
    return (base * (n // max(1, len(base)) + 2))[:n]


def ten(*groups) -> list:
    """The first 10 distinct values of the groups, in order (later groups only fill up)."""
    out = []
    for g in groups:
        for v in g:
            if v not in out and len(out) < 10:
                out.append(v)
    if len(out) < 10:
        raise ValueError(f"only {len(out)} distinct test values: {out}")
    return out


# Which (rule, return) phrasing each of a template's five skins gets: any two skins share at most one of the two,
# so descriptions of one template are not near-duplicates of each other.
PHRASINGS = [(0, 0), (1, 1), (2, 2), (0, 1), (1, 2)]


def task(code, guesses, tests, decisions, values, questions, ask) -> dict:
    return {"code": code, "guesses": guesses, "tests": tests, "decisions": decisions, "values": values,
            "questions": questions, "ask": ask}


# ---------------------------------------------------------------------------------------------------- templates
# Each builder takes a skin (dict) and an RNG and returns `task(...)`: the reference code, guesses (code), test
# argument tuples, the decisions with their literal values and questions, and the template's sentence of the
# description (`ask`, appended to the skin's story). Code is built by `src(**values)` so a guess is the same
# function with one value changed.

def capped_rate(s, r):
    rate, cap = pick(r, s["rates"]), pick(r, s["caps"])
    a, fn = s["arg"], s["fn"]

    def src(rate, cap):
        body = f"round({a} * {lit(rate)}, 2)" if cap is None else f"round(min({a} * {lit(rate)}, {lit(cap)}), 2)"
        return f"def {fn}({a}):\n    if {a} <= 0:\n        return 0.0\n    return {body}\n"

    n = cap / rate
    tests = sorted(ten([0, 1, 2, 3, int(n * 0.6), int(n) + 1, int(n * 1.5), int(n * 2) + 3, int(n * 4), -2],
                       [int(n * 3), int(n * 5), 4, 5, 6]))
    return task(src(rate, cap), [src(rate, None), src(s["default_rate"], cap), src(rate, s["default_cap"])],
                [(x,) for x in tests],
                [f"The {s['thing']} is {money(rate)} per {s['unit']}.",
                 f"The {s['thing']} never goes above {money(cap)}."],
                [rate, cap],
                [f"How much is the {s['thing']} per {s['unit']}?", f"What is the most the {s['thing']} can be?"],
                ([f"The {s['thing']} is a fixed amount per {s['unit']}, but it stops growing at some maximum.",
                  f"We charge the same amount for every {s['unit']}, and there is a ceiling on the {s['thing']}.",
                  f"Each {s['unit']} adds a set amount to the {s['thing']} until it reaches a cap."],
                 [f"Return it in dollars, rounded to cents; {a} of 0 or less means nothing is owed.",
                  f"The result is in dollars (rounded to cents), and a zero or negative {a} costs nothing.",
                  f"Give back the amount rounded to cents, or 0.0 when {a} is not positive."]))


def threshold_discount(s, r):
    t, p = pick(r, [25, 30, 40, 45, 50, 60]), pick(r, [0.05, 0.12, 0.15, 0.2, 0.25])
    a, fn = s["arg"], s["fn"]

    def src(t, p):
        if t is None:
            return f"def {fn}({a}):\n    return round({a} * (1 - {lit(p)}), 2)\n"
        return (f"def {fn}({a}):\n    if {a} >= {lit(t)}:\n        return round({a} * (1 - {lit(p)}), 2)\n"
                f"    return round({a}, 2)\n")

    tests = [round(t * k, 2) for k in (0.3, 0.6, 0.9, 1, 1.1, 1.3, 1.6, 1.9, 2.5)] + [0]
    return task(src(t, p), [src(t, 0.1), src(100, p), src(None, p)], [(x,) for x in tests],
                [f"The discount applies to {s['what']}s of {money(t)} or more.", f"The discount is {pct(p)}."],
                [t, p],
                [f"From what {s['what']} total does the discount start?", "How big is the discount?"],
                ([f"Big enough {s['what']}s get a percentage off.",
                  f"Once a {s['what']} reaches a certain total, we take a percentage off it.",
                  f"From a minimum spend upward, a {s['what']} is discounted by a fixed percentage."],
                 ["Return the amount to pay, rounded to cents.",
                  "The function gives the price the customer pays, rounded to cents.",
                  "Round what is due to cents."]))


def three_bands(s, r):
    lo, hi = pick(r, s["los"]), pick(r, s["his"])
    top, mid, bot = s["labels"]
    a, fn, dlo, dhi = s["arg"], s["fn"], s["default"][0], s["default"][1]

    def src(lo, hi):
        return (f"def {fn}({a}):\n    if {a} >= {lit(hi)}:\n        return {top!r}\n"
                f"    if {a} >= {lit(lo)}:\n        return {mid!r}\n    return {bot!r}\n")

    step = s.get("step", 1)
    between = []
    for x, y in ((lo, dlo), (hi, dhi)):  # values on which the true and the default cut-off disagree
        a0, b0 = min(x, y), max(x, y)
        between += [a0, round(a0 + (b0 - a0) / 2, 2), round(b0 - step / 2, 2)]
    tests = sorted(ten(between, [lo - step, hi - step, s["max"], s["min"], round((s["min"] + lo) / 2, 1),
                                 round((lo + hi) / 2, 1)]))
    return task(src(lo, hi), [src(dlo, dhi), src(dlo, hi), src(lo, dhi)], [(x,) for x in tests[:10]],
                [f"You need at least {lo} {s['units']} for {mid!r}.", f"You need at least {hi} {s['units']} for {top!r}."],
                [lo, hi],
                [f"What is the lowest {s['unit']} that still counts as {mid!r}?",
                 f"From what {s['unit']} on is it {top!r}?"],
                ([f"It should return {top!r}, {mid!r} or {bot!r}, depending on two cut-off {s['units']}.",
                  f"There are two cut-offs: reach the higher one and it is {top!r}, reach only the lower one and it is {mid!r}, otherwise {bot!r}.",
                  f"Map the {s['unit']} to one of three words, {top!r}, {mid!r} or {bot!r}, using a lower and an upper threshold."],
                 ["Reaching a cut-off exactly counts.",
                  "A value equal to a cut-off belongs to the higher band.",
                  "Hitting a threshold exactly is enough for that band."]))


def allowance_overage(s, r):
    free, rate, base = pick(r, s["frees"]), pick(r, s["rates"]), s["base"]
    a, fn = s["arg"], s["fn"]

    def src(free, rate):
        return (f"def {fn}({a}):\n    extra = max(0, {a} - {lit(free)})\n"
                f"    return round({lit(base)} + extra * {lit(rate)}, 2)\n")

    tests = sorted(ten([0, round(free * 0.5), free, free + 1, free + 3, round(free * 1.5), free * 2, free * 3 + 1,
                        round(free * 0.9), free + 10], [free + 2, free + 5, free * 4, free - 1]))
    return task(src(free, rate), [src(0, rate), src(free, s["default_rate"]), src(s["default_free"], rate)],
                [(x,) for x in tests],
                [f"The flat fee includes {free} {s['units']}.", f"Each extra {s['unit']} costs {money(rate)}."],
                [free, rate],
                [f"How many {s['units']} are included in the flat fee?", f"How much does each extra {s['unit']} cost?"],
                ([f"There is a flat {money(base)} fee that includes some {s['units']}, and each {s['unit']} beyond that costs extra.",
                  f"Customers pay {money(base)} up front, which covers a number of {s['units']}; anything over that is charged per {s['unit']}.",
                  f"The price starts at {money(base)}, with an allowance of {s['units']} included and a per-{s['unit']} charge above it."],
                 ["Return the total in dollars, rounded to cents.",
                  "Give the total price rounded to cents.",
                  "The function returns what they owe, rounded to cents."]))


def block_billing(s, r):
    b, price = pick(r, s["blocks"]), pick(r, s["prices"])
    fn = s["fn"]

    def src(b, price, how="ceil"):
        blocks = {"ceil": f"(minutes + {b - 1}) // {b}", "floor": f"minutes // {b}",
                  "exact": f"minutes / {b}"}[how]
        return (f"def {fn}(minutes):\n    if minutes <= 0:\n        return 0.0\n    blocks = {blocks}\n"
                f"    return round(blocks * {lit(price)}, 2)\n")

    tests = sorted(ten([0, 1, b - 1, b, b + 1, 2 * b, 2 * b + 3, 3 * b - 1, 5 * b + 1, 4 * b + 2], [7, 8, 9, 11]))
    return task(src(b, price), [src(b, price, "exact"), src(b, price, "floor"), src(s["default_block"], price)],
                [(x,) for x in tests],
                [f"Time is billed in blocks of {b} minutes.", f"Each block costs {money(price)}."],
                [b, price],
                ["How long is one billing block?", "How much does one block cost?"],
                ([f"{s['things']} are charged in fixed-size blocks of minutes, and a block that has started is charged in full.",
                  f"We bill {s['things'].lower()} by the block: time is split into equal chunks of minutes and any chunk that has begun counts as a whole one.",
                  "Billing works in equal blocks of time; a partly used block is paid like a full block."],
                 ["Return the cost in dollars; 0 minutes or less costs nothing.",
                  "The function returns the price in dollars, and 0.0 for zero or negative minutes.",
                  "Give the amount rounded to cents (nothing is charged for 0 minutes or fewer)."]))


def truncate_text(s, r):
    n, suffix = pick(r, s["limits"]), pick(r, [" (more)", "..", " [cut]", ">>", "~", " etc."])
    fn, a = s["fn"], s["arg"]

    def src(n, suffix, inside=False):
        cut = f"{a}[:{n - len(suffix)}]" if inside else f"{a}[:{n}]"
        return f"def {fn}({a}):\n    if len({a}) <= {n}:\n        return {a}\n    return {cut} + {suffix!r}\n"

    lengths = [0, n - 5, n, n + 1, n + 4, n + 12, 2 * n, 2 * n + 7, 3 * n, n - 1]
    tests = [(fill(s["sample"], k),) for k in lengths]
    return task(src(n, suffix), [src(n, "..."), src(s["default_limit"], suffix), src(n, suffix, inside=True)],
                tests,
                [f"Keep at most {n} characters of the {s['thing']}.",
                 f"Mark a cut {s['thing']} by adding {named(suffix)} at the end."],
                [n, suffix],
                [f"How many characters of the {s['thing']} should be kept?",
                 f"What should be added at the end when the {s['thing']} is cut?"],
                ([f"{an(s['thing'])} that is too long should be cut short, with a marker at the end so readers can see something was cut.",
                  f"If the {s['thing']} does not fit, keep only its beginning and add a marker to show that it was shortened.",
                  f"Overly long {s['thing']}s get trimmed to a maximum length, followed by a little marker."],
                 ["Short ones stay as they are.",
                  "Anything that already fits is returned unchanged.",
                  "If it fits, return it untouched."]))


def length_range(s, r):
    lo, hi = pick(r, s["los"]), pick(r, s["his"])
    fn, a = s["fn"], s["arg"]
    dlo, dhi = s["default"]

    def src(lo, hi):
        return f"def {fn}({a}):\n    return {lo} <= len({a}) <= {hi}\n"

    ks = sorted(ten([min(lo, dlo), (lo + dlo) // 2, max(lo, dlo) - 1, min(hi, dhi) + 1, (hi + dhi) // 2,
                     max(hi, dhi), lo, hi, 0, hi + 1], [lo + 1, hi - 1, max(hi, dhi) + 5, lo - 1]))
    tests = [(fill(s["sample"], k),) for k in ks]
    return task(src(lo, hi), [src(dlo, dhi), src(dlo, hi), src(lo, dhi)], tests,
                [f"A {s['thing']} needs at least {lo} characters.", f"A {s['thing']} can have at most {hi} characters."],
                [lo, hi],
                [f"What is the shortest {s['thing']} allowed?", f"What is the longest {s['thing']} allowed?"],
                ([f"A {s['thing']} is accepted only if its length is between a minimum and a maximum number of characters.",
                  f"We only allow a {s['thing']} whose number of characters is neither below a minimum nor above a maximum.",
                  f"Check that the {s['thing']} is not too short and not too long."],
                 ["Both limits are allowed themselves. Return True or False.",
                  "A length equal to either limit is fine; return a bool.",
                  "Return True when it is acceptable (the limits themselves are acceptable), else False."]))


def reorder(s, r):
    point, target = pick(r, s["points"]), pick(r, s["targets"])
    fn, u = s["fn"], s["units"]

    def src(point, target, fixed=False):
        order = f"{target}" if fixed else f"{target} - stock"
        return f"def {fn}(stock):\n    if stock >= {point}:\n        return 0\n    return {order}\n"

    dpoint, dtarget = s["default"]
    tests = sorted(ten([min(point, dpoint), (point + dpoint) // 2, max(point, dpoint) - 1, 0, 1, point - 1,
                        point - 3, point, point + 2, target], [point + 5, target + 3, 2, point - 2]))
    return task(src(point, target), [src(dpoint, target), src(point, dtarget), src(point, target, fixed=True)],
                [(x,) for x in tests],
                [f"Reorder when fewer than {point} {u} are left.", f"Refill up to {target} {u}."],
                [point, target],
                [f"Below how many {u} should I reorder?", f"Up to how many {u} should the order refill?"],
                ([f"When the {s['thing']} runs low I reorder enough to fill it back up to a fixed level; otherwise I order nothing.",
                  f"Below a certain stock level I top the {s['thing']} up to a target amount, and above it no order is needed.",
                  f"If stock is low, the order should bring the {s['thing']} back to its full level; if not, order zero."],
                 [f"Return how many {u} to order.",
                  f"The function gives the number of {u} to buy.",
                  f"Return the quantity in {u}."]))


def opening_hours(s, r):
    op, cl = pick(r, s["opens"]), pick(r, s["closes"])
    fn = s["fn"]

    def src(op, cl):
        return f"def {fn}(hour):\n    return {op} <= hour < {cl}\n"

    tests = sorted(ten([op - 1, op, op + 1, 8, 9, 12, 17, 18, cl - 1, cl], [19, 20, 0, 23, 7, 3]))
    return task(src(op, cl), [src(9, 17), src(8, 18)], [(x,) for x in tests],
                [f"We open at {op}:00.", f"We close at {cl}:00, so the {cl}:00 hour is already closed."],
                [op, cl],
                ["What time do you open?", "What time do you close?"],
                (["Given a whole hour of the day on the 24-hour clock, tell whether we are open during that hour.",
                  "The input is an hour of the 24-hour clock (a whole number); say whether that hour falls within our opening hours.",
                  "For an hour of the day (24-hour clock), decide if we are open then."],
                 ["Return True or False.",
                  "Give back a bool.",
                  "The answer is True when open, False otherwise."]))


def word_bonus(s, r):
    words = s["words"]
    fits = [n for n in (7, 8, 9, 10) if sum(len(w) >= n for w in words) >= 3 and sum(5 <= len(w) < n for w in words) >= 3]
    n, bonus, per = pick(r, fits), pick(r, [3, 4, 6, 7, 15]), s["per"]
    fn = s["fn"]

    def src(n, bonus):
        if bonus is None:
            return f"def {fn}(word):\n    return len(word) * {per}\n"
        return (f"def {fn}(word):\n    points = len(word) * {per}\n    if len(word) >= {n}:\n"
                f"        points += {bonus}\n    return points\n")

    tests = [(w,) for w in sorted(words, key=len)]
    return task(src(n, bonus), [src(n, None), src(5, bonus), src(n, 10)], tests,
                [f"Words with at least {n} letters get a bonus.", f"The bonus is {bonus} {s['pts']}."],
                [n, bonus],
                ["How long must a word be to get the bonus?", f"How many bonus {s['pts']} does it give?"],
                ([f"Every letter is worth {per} {s['pts']}, and long words get a fixed bonus on top.",
                  f"A word scores {per} {s['pts']} per letter; words that are long enough earn extra {s['pts']} as well.",
                  f"Count {per} {s['pts']} for each letter and add a bonus when the word is long."],
                 ["Return the total.",
                  f"The function returns the number of {s['pts']}.",
                  "Give back the score as a whole number."]))


def tip_minimum(s, r):
    rate, minimum = pick(r, s["rates"]), pick(r, s["minimums"])
    fn, a = s["fn"], s["arg"]

    def src(rate, minimum):
        if minimum is None:
            return f"def {fn}({a}):\n    return round({a} * {lit(rate)}, 2)\n"
        return f"def {fn}({a}):\n    return round(max({a} * {lit(rate)}, {lit(minimum)}), 2)\n"

    edge = minimum / rate
    tests = sorted({0, round(edge * 0.2, 2), round(edge * 0.5, 2), round(edge * 0.8, 2), round(edge * 1.2, 2),
                    round(edge * 1.7, 2), round(edge * 2.4, 2), round(edge * 3.1, 2), round(edge * 5, 2),
                    round(edge * 9.3, 2)})
    return task(src(rate, minimum), [src(0.15, minimum), src(rate, None), src(s["default_rate"], None)],
                [(x,) for x in tests],
                [f"The {s['tip']} is {pct(rate)} of the {s['thing']}.",
                 f"The {s['tip']} is never less than {money(minimum)}."],
                [rate, minimum],
                [f"What percentage of the {s['thing']} is the {s['tip']}?", f"Is there a minimum {s['tip']}?"],
                ([f"The {s['tip']} is a percentage of the {s['thing']}, but never less than a fixed minimum.",
                  f"We take a set percentage of the {s['thing']} as the {s['tip']}, with a floor for small amounts.",
                  f"Work out the {s['tip']} as a share of the {s['thing']}; if that is tiny, a minimum {s['tip']} applies instead."],
                 ["Return it in dollars, rounded to cents.",
                  "Round the result to cents.",
                  "The function returns the amount rounded to cents."]))


def overtime(s, r):
    limit, mult = pick(r, s["limits"]), pick(r, [1.25, 1.75, 2.0])
    fn = s["fn"]
    dlimit = s["default_limit"]

    def src(limit, mult):
        return (f"def {fn}(hours, rate):\n    if hours <= {limit}:\n        return round(hours * rate, 2)\n"
                f"    extra = hours - {limit}\n    return round({limit} * rate + extra * rate * {mult}, 2)\n")

    lo, hi = min(limit, dlimit), max(limit, dlimit)
    hours = [round(lo * 0.5), lo, round(lo + (hi - lo) / 3, 1), round(lo + 2 * (hi - lo) / 3, 1), hi,
             hi + 1, hi + 2.5, hi + 4, hi + 6, hi + 9]
    rates = [18, 22.5, 15, 20, 25, 17.25, 30, 19, 21, 16]
    return task(src(limit, mult), [src(dlimit, 1.5), src(limit, 1.5), src(dlimit, mult)],
                list(zip(hours, rates)),
                [f"Overtime starts after {limit} hours {s['period']}.",
                 f"Overtime hours are paid {mult:g} times the normal rate."],
                [limit, mult],
                [f"After how many hours {s['period']} does overtime start?", "How much more is an overtime hour paid?"],
                ([f"Hours beyond a set number {s['period']} count as overtime and are paid at a higher multiple of the hourly rate.",
                  f"Up to a certain number of hours {s['period']} the normal rate applies; every hour after that is overtime, paid at a multiple of it.",
                  f"Overtime kicks in after a fixed number of hours {s['period']}, and those extra hours earn more than the normal rate."],
                 ["Return the pay, rounded to cents.",
                  "The result is the total pay rounded to cents.",
                  "Give back the wage in dollars, rounded to cents."]))


def loyalty_points(s, r):
    per, cap = pick(r, s["pers"]), pick(r, s["caps"])
    fn, p = s["fn"], s["point"]

    def src(per, cap):
        if cap is None:
            return f"def {fn}(amount):\n    return int(amount // {per})\n"
        return f"def {fn}(amount):\n    points = int(amount // {per})\n    return min(points, {cap})\n"

    tests = sorted(ten([0, per - 0.01, per, round(per * 2.5, 2), round(per * 5.9, 2), round(per * cap * 0.7, 2),
                        per * cap, round(per * cap * 1.3, 2), per * cap * 2, round(per * cap * 3.6, 2)],
                       [round(per * 3.3, 2), per * 8 + 1]))
    return task(src(per, cap), [src(1, cap), src(per, None), src(10, cap)], [(x,) for x in tests],
                [f"Customers earn one {p} for every {money(per)} spent.", f"At most {cap} {p}s per purchase."],
                [per, cap],
                [f"How much do I have to spend to earn one {p}?", f"Is there a maximum number of {p}s per purchase?"],
                ([f"Customers earn one {p} for every full block of dollars they spend, up to a limit per purchase.",
                  f"Each purchase earns {p}s: one per whole step of spending, with a maximum for a single purchase.",
                  f"Spending earns {p}s at a fixed number of dollars per {p} (only full steps count), capped per purchase."],
                 [f"Return the whole number of {p}s.",
                  "The function returns an int.",
                  f"Give back how many {p}s the purchase earns."]))


def tax_exempt(s, r):
    rate, exempt = pick(r, s["rates"]), pick(r, s["categories"])
    fn, cats = s["fn"], s["categories"]

    def src(rate, exempt):
        if exempt is None:
            return f"def {fn}(price, category):\n    return round(price * (1 + {lit(rate)}), 2)\n"
        return (f"def {fn}(price, category):\n    if category == {exempt!r}:\n        return round(price, 2)\n"
                f"    return round(price * (1 + {lit(rate)}), 2)\n")

    others = [c for c in cats if c != exempt]
    cat_list = ", ".join(repr(c) for c in cats)
    prices = [4.99, 12.5, 20, 7.25, 99.9, 3.1, 45, 15.75, 60, 8.8]
    cs = [exempt, others[0], exempt, others[1], others[0], exempt, others[-1], others[1], exempt, others[-1]]
    return task(src(rate, exempt), [src(0.1, exempt), src(rate, None), src(rate, others[0])],
                list(zip(prices, cs)),
                [f"Sales tax is {pct(rate)}.", f"{exempt!r} items are tax-free."],
                [rate, exempt],
                ["What is the sales tax rate?", "Is any category tax-free?"],
                ([f"The category is one of {cat_list}. Add sales tax to the price, except that one category is not taxed.",
                  f"Items fall into the categories {cat_list}; all of them carry sales tax except one.",
                  f"Every item has a category ({cat_list}), and one category is exempt from the sales tax the others pay."],
                 ["Return the price to pay, rounded to cents.",
                  "Give back the final price rounded to cents.",
                  "The result is the shelf price including any tax, rounded to cents."]))


def tax_allowance(s, r):
    allowance, rate = pick(r, s["allowances"]), pick(r, [0.12, 0.15, 0.25, 0.3, 0.35])
    fn, a = s["fn"], s["arg"]

    def src(allowance, rate):
        return (f"def {fn}({a}):\n    taxable = max(0, {a} - {allowance})\n"
                f"    return round(taxable * {lit(rate)}, 2)\n")

    al = allowance
    tests = [0, round(al * 0.4), round(al * 0.8), al, round(al * 1.05), round(al * 1.3), round(al * 1.9),
             round(al * 2.5), al * 4, round(al * 7.5)]
    return task(src(allowance, rate), [src(0, rate), src(allowance, 0.2), src(s["default"], rate)],
                [(x,) for x in tests],
                [f"The first {money(allowance)} is not taxed.", f"Everything above that is taxed at {pct(rate)}."],
                [allowance, rate],
                [f"How much of the {s['thing']} is tax-free?", "What rate applies above that?"],
                ([f"Only the part of the {s['thing']} above a tax-free allowance is taxed, at one flat rate.",
                  f"There is a tax-free amount; whatever the {s['thing']} exceeds it by is taxed at a single rate.",
                  f"Tax is charged at a flat percentage, but only on the {s['thing']} beyond an allowance."],
                 ["Return the tax in dollars, rounded to cents.",
                  "The function returns the tax owed, rounded to cents.",
                  "Give back how much tax is due, rounded to cents."]))


def top_n(s, r):
    n = pick(r, [2, 4, 6, 7])
    fn, names = s["fn"], s["names"]

    def src(n):
        return f"def {fn}(scores):\n    ranked = sorted(scores, key=scores.get, reverse=True)\n    return ranked[:{n}]\n"

    rr = random.Random(f"{fn}-{n}")
    sizes = [1, 2, 3, n, n + 1, n + 2, 8, 9, 11, 12]
    tests = []
    for k in sizes:
        who = rr.sample(names, k)
        pts = rr.sample(range(5, 400), k)
        tests.append(({w: p for w, p in zip(who, pts)},))
    return task(src(n), [src(3), src(10), src(5)], tests,
                [f"Show the top {n} {s['things']}."], [n],
                [f"How many {s['things']} should the list show?"],
                ([f"The input maps each {s['thing']} to its {s['score']}; return the names of the best ones, highest first.",
                  f"Given a dict from {s['thing']} to {s['score']}, list the leading names in order, best first.",
                  f"From a mapping of {s['things']} to their {s['score']}s, pick the top names, highest {s['score']} first."],
                 [f"Only a fixed number make the list, and the {s['score']}s are all different.",
                  f"The list has a fixed length (or is shorter if there are not enough {s['things']}); {s['score']}s never tie.",
                  f"There is a set number of places on the list; no {s['score']}s are equal."]))


def default_label(s, r):
    default = pick(r, ["n/a", "other", "misc", "not listed", "?", "none", "-"])
    fn, mapping = s["fn"], s["mapping"]

    def src(default):
        return f"def {fn}(code):\n    names = {mapping!r}\n    return names.get(code, {default!r})\n"

    known = list(mapping)[:4]
    tests = [(c,) for c in known] + [(c,) for c in s["unknown"]]
    listing = ", ".join(f"{k!r} is {v!r}" for k, v in mapping.items())
    return task(src(default), [src("unknown"), src(None), src("")], tests,
                [f"Any {s['code']} not in the list should give {named(default)}."], [default],
                [f"What should come back for a {s['code']} that is not in the list?"],
                ([f"The known {s['code']}s are: {listing}.",
                  f"These {s['code']}s are defined: {listing}.",
                  f"Here is the mapping I use: {listing}."],
                 ["Anything else needs a fixed placeholder text.",
                  f"Any other {s['code']} should come back as one fixed placeholder.",
                  "Codes outside the list get a default text."]))


def unit_suffix(s, r):
    suffix = pick(r, s["suffixes"])
    others = [x for x in s["suffixes"] if x != suffix]
    fn, a, d = s["fn"], s["arg"], s["decimals"]
    dec = ["no decimals", "one decimal", "two decimals"][d]

    def src(suffix):
        return f"def {fn}({a}):\n    return '%.{d}f' % {a} + {suffix!r}\n"

    return task(src(suffix), [src(others[0]), src(others[1]), src("")], [(x,) for x in s["values"]],
                [f"Put {suffix!r} right after the number."], [suffix],
                [f"What exactly should follow the number?"],
                ([f"Show the number with {dec} followed by the unit, written exactly the way we always write it.",
                  f"Format it with {dec}, then the unit in our house style.",
                  f"Round it for display to {dec} and put our usual unit text after it."],
                 ["Return the text.",
                  "The function returns a string.",
                  "Give back the label as a string."]))


def kth_free(s, r):
    k = pick(r, [4, 6, 7, 8, 9, 11, 12])
    fn, item = s["fn"], s["item"]

    def src(k):
        if k is None:
            return f"def {fn}(count, price):\n    return round(count * price, 2)\n"
        return f"def {fn}(count, price):\n    free = count // {k}\n    return round((count - free) * price, 2)\n"

    # multiples of k tell k from a larger guess; multiples of 5 and 10 tell it from a smaller one
    counts = ten([1, k - 1, k, k + 1, 2 * k, 3 * k, 5, 10, 20, 30], [25, 2 * k + 1, 5 * k - 1, 41])
    prices = [s["price"]] * 5 + [round(s["price"] * 1.2, 2)] * 5
    return task(src(k), [src(5), src(10), src(None)], list(zip(counts, prices)),
                [f"Every {ordinal(k)} {item} is free."], [k],
                [f"How often is a {item} free?"],
                ([f"Some {item}s in an order are free under our loyalty deal.",
                  f"Our deal gives away {item}s: in a big enough order, some {item}s cost nothing.",
                  f"Regulars get free {item}s at a fixed interval in each order."],
                 [f"Return the total for `count` {item}s at `price` each, rounded to cents.",
                  f"Compute what `count` {item}s at `price` each cost after the deal, rounded to cents.",
                  "The function returns the order total in dollars (rounded to cents)."]))


def clamp_add(s, r):
    amount, maximum = pick(r, s["amounts"]), pick(r, s["maxima"])
    fn, a, u = s["fn"], s["arg"], s["units"]

    def src(amount, maximum):
        if maximum is None:
            return f"def {fn}({a}):\n    return {a} + {amount}\n"
        return f"def {fn}({a}):\n    return min({a} + {amount}, {maximum})\n"

    m, dm = maximum, s["default_max"]
    tests = sorted(ten([0, 1, round(m * 0.2), round(m * 0.35), m - amount - 1, m - amount + 1, m - amount // 2,
                        m - 1, m, min(m, dm) - 1, max(m, dm) - 1], [round(m * 0.5), round(m * 0.1), 2, 3]))
    return task(src(amount, maximum), [src(amount, None), src(amount, dm), src(s["default_amount"], maximum)],
                [(x,) for x in tests],
                [f"One {s['action']} adds {amount} {u}.", f"It can never go above {maximum} {u}."],
                [amount, maximum],
                [f"How many {u} does one {s['action']} add?", f"What is the most {u} there can be?"],
                ([f"Each {s['action']} adds a fixed number of {u}, up to a maximum.",
                  f"A {s['action']} raises the {u} by a set amount, but never past a ceiling.",
                  f"Using a {s['action']} increases the {u} by a fixed step, capped at a top value."],
                 [f"Return the new number of {u}.",
                  "The function returns the new value.",
                  f"Give back the {u} after the {s['action']}."]))


def tolerance_fine(s, r):
    tol, per = pick(r, s["tols"]), pick(r, s["pers"])
    fn, x, lim, u = s["fn"], s["arg"], s["limit_arg"], s["unit"]

    def src(tol, per):
        return (f"def {fn}({x}, {lim}):\n    over = {x} - {lim}\n    if over <= {lit(tol)}:\n        return 0\n"
                f"    return round(over * {lit(per)}, 2)\n")

    L, dt = s["limit"], s["default_tol"]
    lo, hi = min(tol, dt), max(tol, dt)
    overs = ten([-5 * s["step"], 0, lo, round(lo + (hi - lo) * 0.3, 1), round(lo + (hi - lo) * 0.6, 1), hi,
                 hi + s["step"], hi * 2, hi * 3 + s["step"], hi * 5],
                [hi * 4, hi * 7, -s["step"]])
    if tol == 0 or dt == 0:
        raise ValueError("tolerances must be positive")
    tests = [(round(L + o, 2), L) for o in overs]
    return task(src(tol, per), [src(0, per), src(tol, s["default_per"]), src(dt, per)], tests,
                [f"Up to {tol:g} {s.get('units', u + 's')} over the limit there is no fine.",
                 f"Above that the fine is {money(per)} for every {u} over the limit, counted from the limit."],
                [tol, per],
                [f"How far over the limit can one go without a fine?", f"How much is the fine per {u} over?"],
                ([f"Small overshoots are tolerated; beyond that the fine grows with every {u} over the limit.",
                  f"Going a little over is forgiven, but past that margin there is a fine per {u} over.",
                  f"We allow a margin above the limit; anyone beyond the margin pays for each {u} above the limit."],
                 ["Return the fine in dollars (0 when there is none).",
                  "The function returns the fine, rounded to cents, or 0 if there is none.",
                  "Give back the amount owed, 0 for no fine."]))


def late_points(s, r):
    per, floor = pick(r, [3, 5, 7, 15, 20]), pick(r, [10, 20, 25, 30, 40])
    fn = s["fn"]

    def src(per, floor):
        return f"def {fn}(score, days_late):\n    return max(score - days_late * {per}, {floor})\n"

    f = s["full"]  # some marks stay above the floor, some land below it
    tests = ten([(f, 0), (f - 8, 1), (f - 20, 2), (60, 1), (floor + per, 3), (floor + 5, 2), (floor, 1),
                 (floor + 2 * per, 5), (30 + floor, 12), (75, 2)], [(f - 3, 3), (48, 2)])
    return task(src(per, floor), [src(per, 0), src(10, floor), src(10, 0)], tests,
                [f"Each day late costs {per} points.", f"The mark never drops below {floor}."],
                [per, floor],
                ["How many points does each day late cost?", "Is there a lowest mark it can drop to?"],
                ([f"Late {s['thing']}s lose a fixed number of points per day late, but the mark has a floor.",
                  f"Every day a {s['thing']} is late takes points off, though the mark cannot fall below a minimum.",
                  f"For each day past the deadline the {s['thing']} loses some points, down to a lowest possible mark."],
                 ["Return the mark after the penalty.",
                  "The function returns the final mark.",
                  "Give back the penalised mark."]))


def ceil_boxes(s, r):
    k = pick(r, s["ks"])
    fn, a, box, items = s["fn"], s["arg"], s["box"], s["items"]
    boxes = box + ("es" if box.endswith(("s", "x", "ch", "sh")) else "s")

    def src(k, how="ceil"):
        expr = {"ceil": f"-(-{a} // {k})", "floor": f"{a} // {k}", "round": f"round({a} / {k})"}[how]
        return f"def {fn}({a}):\n    return {expr}\n"

    tests = sorted(ten([0, 1, k - 1, k, k + 1, 2 * k + 1, 3 * k, round(3.6 * k), 7 * k - 1, 10 * k + 3],
                       [2, 5 * k, 4 * k + 1]))
    return task(src(k), [src(s["default"]), src(k, "floor"), src(k, "round")], [(x,) for x in tests],
                [f"One {s['box']} holds {k} {s['items']}."], [k],
                [f"How many {s['items']} fit in one {s['box']}?"],
                ([f"Every {box} holds the same fixed number of {items}, and a part-filled {box} still counts.",
                  f"{items.capitalize()} go into {boxes} of a fixed size; a {box} that is only partly full is still needed.",
                  f"We fill {boxes} with {items}, a set number per {box}, and round up for the leftovers."],
                 [f"Return how many {boxes} are needed.",
                  f"The function gives the number of {boxes}.",
                  f"Give back the count of {boxes}."]))


def compound(s, r):
    rate = pick(r, s["rates"])
    fn, a = s["fn"], s["arg"]

    def src(rate, simple=False):
        grow = f"(1 + {lit(rate)} * years)" if simple else f"(1 + {lit(rate)}) ** years"
        return f"def {fn}({a}, years):\n    return round({a} * {grow}, 2)\n"

    v = s["start"]
    vals = [(round(v * f, 2), y) for f, y in ((1, 1), (1, 2), (1, 5), (2, 3), (0.5, 10), (1, 0), (3, 4), (1.5, 7),
                                               (1, 12), (0.8, 1))]
    return task(src(rate), [src(0.05), src(rate, simple=True), src(0.1)], vals,
                [f"The {s['thing']} grows by {pct(rate)} every year."], [rate],
                [f"By how much does the {s['thing']} grow each year?"],
                ([f"The {s['thing']} grows by the same percentage every year, compounding.",
                  f"Each year the {s['thing']} goes up by a fixed percentage of the previous year's value.",
                  f"Apply a constant yearly growth rate to the {s['thing']}, compounded once per year."],
                 ["Return the value after `years` years, rounded to cents.",
                  "The function returns the amount after the given number of years, rounded to cents.",
                  "Give back the future value, rounded to cents."]))


def slug(s, r):
    sep, n = pick(r, ["_", ".", "+", "~"]), pick(r, s["limits"])
    fn = s["fn"]

    def src(sep, n):
        tail = "" if n is None else f"[:{n}]"
        return f"def {fn}(title):\n    words = title.lower().split()\n    return {sep!r}.join(words){tail}\n"

    titles = s["titles"]
    assert sum(len("-".join(t.split())) > n for t in titles) >= 3, fn
    return task(src(sep, n), [src("-", n), src(sep, None), src("-", None)], [(t,) for t in titles],
                [f"Join the words with {named(sep)}.", f"Keep at most {n} characters."],
                [sep, n],
                ["What character goes between the words?", "How long can the result be?"],
                (["Lower-case it, join the words with one separator character, and cut the result to a maximum length.",
                  "Make it lower case, put a single separator between the words, and trim it if it gets too long.",
                  "The key is the lower-cased words glued together with a separator, shortened to a length limit."],
                 ["Return the string.",
                  "The function returns that string.",
                  "Give back the result."]))


def initials(s, r):
    mark, m = pick(r, [".", "_", "-", "/"]), pick(r, [2, 3])
    fn = s["fn"]

    def src(mark, m):
        parts = "name.split()" if m is None else f"name.split()[:{m}]"
        return (f"def {fn}(name):\n    parts = {parts}\n"
                f"    return ''.join(p[0].upper() + {mark!r} for p in parts)\n")

    return task(src(mark, m), [src("", m), src(mark, None), src(".", None)], [(n,) for n in s["names"]],
                [f"Put {named(mark)} after each initial.", f"Use at most {m} initials."],
                [mark, m],
                ["What goes after each initial?", "How many initials at most?"],
                (["Take the first letter of each word of the name, upper-cased, each followed by a mark.",
                  "Build it from the capitalised first letter of every word in the name, with a mark after each letter.",
                  "Use the first letter of each name part in upper case and put a mark after every initial."],
                 ["Only up to a fixed number of initials are used.",
                  "Long names are cut to a maximum number of initials.",
                  "There is a limit on how many initials appear."]))


def mask_digits(s, r):
    keep, ch = pick(r, [2, 3, 5, 6]), pick(r, ["#", "x", "X", "-"])
    fn, a = s["fn"], s["arg"]

    def src(keep, ch):
        return (f"def {fn}({a}):\n    digits = str({a})\n"
                f"    return {ch!r} * (len(digits) - {keep}) + digits[-{keep}:]\n")

    return task(src(keep, ch), [src(4, "*"), src(keep, "*"), src(4, ch)], [(v,) for v in s["values"]],
                [f"Show only the last {keep} digits.", f"Replace each hidden digit with {named(ch)}."],
                [keep, ch],
                ["How many digits stay visible at the end?", "What character replaces the hidden digits?"],
                ([f"Hide all but the last few digits of the {s['thing']}.",
                  f"Only the end of the {s['thing']} should stay readable.",
                  f"Mask the {s['thing']} except for its final digits."],
                 ["Each hidden digit is replaced by one mask character.",
                  "Every hidden digit becomes one mask character.",
                  "Swap each hidden digit for a single mask character and return the string."]))


def temp_alert(s, r):
    low, high = pick(r, s["lows"]), pick(r, s["highs"])
    fn = s["fn"]
    hot, cold = s["labels"]

    def src(low, high):
        return (f"def {fn}(temp):\n    if temp > {lit(high)}:\n        return {hot!r}\n    if temp < {lit(low)}:\n"
                f"        return {cold!r}\n    return 'ok'\n")

    dl, dh = s["default"]
    a, b = sorted((low, dl))
    c, d = sorted((high, dh))
    tests = sorted(ten([round(a + (b - a) * f, 2) for f in (0.25, 0.5, 0.9)]
                       + [round(c + (d - c) * f, 2) for f in (0.1, 0.5, 0.75)]
                       + [round((low + high) / 2, 1), round(low - 3, 1), round(high + 4, 1), low],
                       [high, round(low - 8, 1), round(high + 9, 1)]))
    return task(src(low, high), [src(dl, dh), src(dl, high), src(low, dh)], [(x,) for x in tests],
                [f"Above {high:g} degrees is {hot!r}.", f"Below {low:g} degrees is {cold!r}."],
                [high, low],
                [f"Above what temperature is it {hot!r}?", f"Below what temperature is it {cold!r}?"],
                ([f"Given the {s['thing']} temperature in degrees Celsius, return {hot!r} above an upper limit, {cold!r} below a lower limit and 'ok' otherwise.",
                  f"The reading is in degrees Celsius: say {hot!r} when it is over the upper limit, {cold!r} when under the lower one, else 'ok'.",
                  f"Classify a {s['thing']} reading (Celsius) as {hot!r}, {cold!r} or 'ok' using a lower and an upper limit."],
                 ["The limits themselves are 'ok'.",
                  "A reading exactly at a limit is still 'ok'.",
                  "Being exactly on a limit counts as 'ok'."]))


def xp_level(s, r):
    per, cap = pick(r, s["pers"]), pick(r, [12, 15, 20, 25, 30])
    fn, a = s["fn"], s["arg"]

    def src(per, cap, start=1):
        lvl = f"{start} + {a} // {per}" if start else f"{a} // {per}"
        if cap is None:
            return f"def {fn}({a}):\n    return {lvl}\n"
        return f"def {fn}({a}):\n    level = {lvl}\n    return min(level, {cap})\n"

    tests = ten([0, per - 1, per, per * 2 + 1, per * 5, per * 9 - 1, per * (cap - 1), per * cap, per * cap * 2,
                 per * 45], [per * 60, per * 3])
    return task(src(per, cap), [src(100, cap), src(per, None), src(per, cap, start=0)], [(x,) for x in tests],
                [f"Every {per} {s['pts']} gives one more level, starting at level 1.", f"The highest level is {cap}."],
                [per, cap],
                [f"How many {s['pts']} does one level take?", "Is there a highest level?"],
                ([f"Everyone starts at level 1 and goes up one level for each fixed amount of {s['pts']}, up to a top level.",
                  f"Level 1 is the start; every full step of {s['pts']} adds a level, and there is a maximum level.",
                  f"A fixed number of {s['pts']} is needed per level above the first, and levels stop at a cap."],
                 ["Return the level.",
                  "The function returns the level as an int.",
                  "Give back the current level."]))


def threshold_multiplier(s, r):
    t, m = pick(r, s["ts"]), pick(r, s["ms"])
    fn, b, x = s["fn"], s["base"], s["arg"]

    def src(t, m):
        return (f"def {fn}({b}, {x}):\n    if {x} >= {t}:\n        return round({b} * {lit(m)}, 2)\n"
                f"    return {b}\n")

    dt, dm = s["default"]
    lo, hi = min(t, dt), max(t, dt)
    # rolls between the true and the default threshold come several times, with different bases
    xs = [s["min"], lo - 1, lo, (lo + hi) // 2, hi - 1, hi, s["max"], lo, hi - 1, (hi + s["max"]) // 2]
    bases = [10, 12.5, 8, 20, 15, 9.75, 30, 11, 14, 7]
    pairs = ten(list(zip(bases, xs)), [(13, hi), (6.5, lo), (25, s["max"])])
    return task(src(t, m), [src(dt, dm), src(dt, m), src(t, dm)], pairs,
                [s["dec_t"].format(t=t), s["dec_m"].format(m=f"{m:g}")],
                [t, m],
                [s["q_t"], s["q_m"]],
                s["ask"])


def best_n_average(s, r):
    n = pick(r, [2, 4, 5, 6])
    fn = s["fn"]

    def src(n):
        pick_ = "scores" if n is None else f"sorted(scores, reverse=True)[:{n}]"
        return f"def {fn}(scores):\n    best = {pick_}\n    return round(sum(best) / len(best), 1)\n"

    rr = random.Random(fn)
    sizes = [1, 2, 3, n, n + 1, n + 2, 7, 8, 9, 10]
    tests = [(rr.sample(range(s["lo"], s["hi"]), k),) for k in sizes]
    return task(src(n), [src(None), src(3), src(n + 1)], tests,
                [f"Only the best {n} {s['things']} count."], [n],
                [f"How many {s['things']} count towards the average?"],
                ([f"Average a list of {s['things']}, but only the best few count (fewer than that: average them all).",
                  f"Only the highest {s['things']} go into the average; if there are not that many, use them all.",
                  f"Take the average of the top {s['things']} only, or of all of them when the list is short."],
                 ["Round to one decimal.",
                  "Return it rounded to one decimal place.",
                  "The result is rounded to one decimal."]))


def two_tier(s, r):
    tier, high, low = pick(r, s["tiers"]), pick(r, s["highs"]), s["low"]
    fn, a, u = s["fn"], s["arg"], s["unit"]

    def src(tier, high):
        if tier is None:
            return f"def {fn}({a}):\n    return round({a} * {lit(low)}, 2)\n"
        return (f"def {fn}({a}):\n    if {a} <= {tier}:\n        return round({a} * {lit(low)}, 2)\n"
                f"    return round({tier} * {lit(low)} + ({a} - {tier}) * {lit(high)}, 2)\n")

    dt = s["default_tier"]
    lo, hi = min(tier, dt), max(tier, dt)
    tests = sorted(ten([0, round(lo * 0.5), lo, round(lo + (hi - lo) * 0.3), round(lo + (hi - lo) * 0.7), hi,
                        hi + 1, round(hi * 1.5), hi * 2, hi * 3 + 7], [hi * 4, 1, hi + 3]))
    return task(src(tier, high), [src(None, high), src(dt, high), src(tier, s["default_high"])],
                [(x,) for x in tests],
                [f"The cheaper rate covers the first {tier} {u}s.", f"Every {u} after that costs {money(high)}."],
                [tier, high],
                [f"How many {u}s are charged at the cheaper rate?", f"What does each {u} after that cost?"],
                ([f"The first {u}s cost {money(low)} each; after a set number of {u}s a higher price applies to the rest.",
                  f"Up to a certain number of {u}s the price is {money(low)} per {u}, and every {u} beyond that costs more.",
                  f"A cheap rate of {money(low)} per {u} covers the first block of {u}s; the rest pay a higher rate."],
                 ["Return the total in dollars, rounded to cents.",
                  "The function returns the total, rounded to cents.",
                  "Give back the bill rounded to cents."]))


# ---------------------------------------------------------------------------------------------------- skins
# Five per template. `story` is the user's own opening; the template adds one sentence and the signature.
SKINS: dict = {
    capped_rate: [
        dict(domain="libraries", fn="late_fee", arg="days_late", thing="late fee", unit="day",
             rates=[0.2, 0.25, 0.3, 0.4], caps=[4, 5, 6, 7.5], default_rate=0.1, default_cap=10,
             story="Our town library wants its self-checkout kiosk to print the fine when a book comes back late."),
        dict(domain="parking", fn="overstay_charge", arg="hours_over", thing="overstay charge", unit="hour",
             rates=[1.5, 2, 2.5, 3], caps=[12, 15, 18], default_rate=1, default_cap=20,
             story="Drivers at our supermarket car park pay when they stay past the free period, and the ticket "
                   "machine gets the number of whole hours over."),
        dict(domain="mobility", fn="ride_price", arg="minutes", thing="ride price", unit="minute",
             rates=[0.15, 0.2, 0.35], caps=[9, 12, 14], default_rate=0.1, default_cap=20,
             story="We rent electric scooters by the minute and the app should show riders what their trip costs."),
        dict(domain="rentals", fn="overdue_charge", arg="days_overdue", thing="overdue charge", unit="day",
             rates=[3, 4, 6], caps=[30, 40, 45], default_rate=5, default_cap=50,
             story="Our hardware store lends out drills, ladders and floor sanders, and late returns pay extra."),
        dict(domain="telecom", fn="roaming_charge", arg="megabytes", thing="roaming charge", unit="megabyte",
             rates=[0.05, 0.08, 0.12], caps=[15, 25, 30], default_rate=0.1, default_cap=50,
             story="Our phone company bills customers for mobile data they use while travelling abroad."),
    ],
    threshold_discount: [
        dict(domain="retail", fn="checkout_total", arg="total", what="order",
             story="My online plant shop wants to reward customers who fill up their basket."),
        dict(domain="catering", fn="catering_price", arg="amount", what="booking",
             story="A small catering business I run quotes prices for office lunches and party platters."),
        dict(domain="printing", fn="print_job_price", arg="price", what="print job",
             story="At the copy shop, students and clubs print flyers and posters in bulk."),
        dict(domain="events", fn="group_ticket_total", arg="subtotal", what="ticket purchase",
             story="Our community theatre sells tickets online and wants to encourage group outings."),
        dict(domain="pets", fn="pet_supply_total", arg="basket", what="basket",
             story="The pet supplies store down the road asked me to help with their till software."),
    ],
    three_bands: [
        dict(domain="grading", fn="exam_result", arg="score", unit="score", units="points",
             labels=("distinction", "pass", "fail"), los=[40, 45, 55, 60], his=[78, 82, 85, 88], default=(50, 70),
             min=0, max=100, story="Our evening school marks exams out of 100 and prints one word on the certificate."),
        dict(domain="typing", fn="typing_level", arg="wpm", unit="speed", units="words per minute",
             labels=("fast", "average", "slow"), los=[25, 30, 35], his=[65, 70, 75], default=(40, 60), min=5, max=120,
             story="My typing tutor app measures words per minute and shows learners a simple level."),
        dict(domain="finance", fn="credit_band", arg="credit_score", unit="score", units="points",
             labels=("excellent", "fair", "poor"), los=[600, 620, 650], his=[700, 720, 760], default=(580, 740),
             min=300, max=850, step=5,
             story="A loan comparison site I'm building groups applicants by their credit score."),
        dict(domain="gardening", fn="soil_state", arg="moisture", unit="moisture", units="percent moisture",
             labels=("wet", "moist", "dry"), los=[18, 22, 25], his=[65, 70, 75], default=(30, 60), min=0, max=100,
             story="A soil sensor in each of my greenhouse beds reports moisture from 0 to 100."),
        dict(domain="quizzes", fn="quiz_medal", arg="percent", unit="percentage", units="percent",
             labels=("gold", "silver", "no medal"), los=[50, 55, 65], his=[80, 85, 95], default=(60, 90), min=0,
             max=100, story="Our pub quiz league gives each team a medal based on the share of questions it got right."),
    ],
    allowance_overage: [
        dict(domain="telecom", fn="monthly_bill", arg="gigabytes", unit="gigabyte", units="gigabytes", base=20,
             frees=[5, 8, 12, 15], rates=[2.5, 3, 4], default_free=10, default_rate=1,
             story="I'm writing the billing code for a small mobile network's monthly data plan."),
        dict(domain="travel", fn="baggage_fee", arg="weight_kg", unit="kilogram", units="kilograms", base=30,
             frees=[23, 25, 32], rates=[8, 12, 15], default_free=20, default_rate=10,
             story="Our regional airline charges for checked luggage at the desk."),
        dict(domain="moving", fn="van_hire_cost", arg="distance_km", unit="kilometre", units="kilometres", base=80,
             frees=[30, 40, 60], rates=[0.8, 1.2, 1.5], default_free=100, default_rate=1,
             story="People hire our removal van for the day, and the price depends on how far they drive it."),
        dict(domain="office", fn="printing_cost", arg="pages", unit="page", units="pages", base=2,
             frees=[12, 20, 25], rates=[0.05, 0.15, 0.2], default_free=10, default_rate=0.1,
             story="The co-working space charges members for the shared printer each day."),
        dict(domain="car rental", fn="rental_cost", arg="miles", unit="mile", units="miles", base=45,
             frees=[120, 150, 200], rates=[0.25, 0.3, 0.35], default_free=100, default_rate=0.5,
             story="A small car rental desk wants the daily price including mileage."),
    ],
    block_billing: [
        dict(domain="legal", fn="consultation_fee", things="Consultations", blocks=[6, 10, 12], prices=[25, 40, 55],
             default_block=60, story="I'm a lawyer and I bill clients for phone consultations."),
        dict(domain="workspace", fn="room_charge", things="Meeting rooms", blocks=[20, 30], prices=[12, 15, 18],
             default_block=60, story="Our co-working space rents out its meeting rooms to visitors."),
        dict(domain="tutoring", fn="lesson_price", things="Lessons", blocks=[20, 45], prices=[14, 22, 30],
             default_block=60, story="I tutor maths online and want to bill sessions fairly."),
        dict(domain="telecom", fn="call_cost", things="Calls", blocks=[2, 3, 5], prices=[0.1, 0.25, 0.4],
             default_block=1, story="A prepaid phone card service needs to price international calls."),
        dict(domain="it support", fn="support_bill", things="Support sessions", blocks=[15, 20], prices=[20, 35],
             default_block=30, story="Our IT helpdesk charges small businesses for remote support sessions."),
    ],
    truncate_text: [
        dict(domain="news", fn="ticker_headline", arg="headline", thing="headline", limits=[28, 32, 40],
             default_limit=50, sample="Council approves new bridge over the river ",
             story="Our newsroom shows headlines on a scrolling ticker that has little room."),
        dict(domain="messaging", fn="sms_preview", arg="message", thing="message preview", limits=[24, 30, 36],
             default_limit=20, sample="Running late, see you at the station soon ",
             story="The notification banner of our chat app shows the start of each new message."),
        dict(domain="retail", fn="receipt_name", arg="product", thing="product name", limits=[16, 18, 22],
             default_limit=30, sample="Organic whole wheat sourdough loaf ",
             story="The thermal printer for our till receipts has narrow paper."),
        dict(domain="podcasts", fn="watch_title", arg="title", thing="episode title", limits=[14, 15, 17],
             default_limit=25, sample="Episode twelve: the history of coffee houses ",
             story="My podcast app has a smartwatch screen that can only fit a few characters of each episode."),
        dict(domain="calendar", fn="event_label", arg="name", thing="event name", limits=[19, 21, 26],
             default_limit=10, sample="Quarterly planning meeting with design team ",
             story="In the month view of our calendar, each event gets a small box."),
    ],
    length_range: [
        dict(domain="accounts", fn="valid_username", arg="username", thing="username", los=[6, 7], his=[12, 14],
             default=(3, 20), sample="samwise",
             story="New members on our hiking forum pick a username when they sign up."),
        dict(domain="sports", fn="valid_team_name", arg="team", thing="team name", los=[5, 7], his=[24, 26],
             default=(2, 30), sample="red rovers ",
             story="Teams registering for our small-sided football league enter a team name on a form."),
        dict(domain="security", fn="valid_wifi_password", arg="password", thing="Wi-Fi password", los=[11, 12],
             his=[40, 48], default=(8, 63), sample="correcthorse",
             story="The setup screen of our home router checks the Wi-Fi password people type."),
        dict(domain="inventory", fn="valid_sku", arg="sku", thing="product code", los=[7, 8], his=[14, 15],
             default=(4, 20), sample="AB12CD34",
             story="Warehouse staff type product codes into a handheld scanner app."),
        dict(domain="social", fn="valid_hashtag", arg="tag", thing="hashtag", los=[6, 7], his=[22, 24],
             default=(2, 30), sample="summerfest",
             story="Our events app lets people tag their photos with a hashtag."),
    ],
    reorder: [
        dict(domain="cafe", fn="beans_to_order", thing="coffee bean shelf", units="bags", points=[5, 6, 14],
             targets=[25, 30, 36], default=(10, 20),
             story="I manage stock for a small café and count bags of coffee beans every Monday."),
        dict(domain="office", fn="paper_to_order", thing="printer paper cupboard", units="reams", points=[14, 16, 4],
             targets=[40, 45, 60], default=(10, 50),
             story="Our office manager wants a quick helper for restocking printer paper."),
        dict(domain="pharmacy", fn="boxes_to_order", thing="pharmacy shelf", units="boxes", points=[15, 18, 6],
             targets=[48, 55, 70], default=(10, 100),
             story="At the pharmacy we track boxes of a common cold remedy."),
        dict(domain="bikes", fn="tubes_to_order", thing="inner tube rack", units="tubes", points=[5, 14, 15],
             targets=[35, 40, 42], default=(10, 25),
             story="My bike repair shop keeps spare inner tubes on a rack by the counter."),
        dict(domain="vending", fn="cans_to_load", thing="vending machine", units="cans", points=[15, 20, 24],
             targets=[64, 72, 80], default=(10, 50),
             story="I restock vending machines around the campus and want to know what to bring."),
    ],
    opening_hours: [
        dict(domain="bakery", fn="bakery_open", opens=[5, 6], closes=[20, 21],
             story="Our bakery's website should show a green light when the shop is open."),
        dict(domain="leisure", fn="pool_open", opens=[6, 5], closes=[21, 22],
             story="The council swimming pool wants its app to say whether you can swim right now."),
        dict(domain="support", fn="hotline_staffed", opens=[6, 5], closes=[22, 23],
             story="Customers of our internet provider can call a support hotline."),
        dict(domain="fitness", fn="gym_staffed", opens=[5, 6], closes=[23, 22],
             story="Our gym is staffed only part of the day, and the door system needs to know when."),
        dict(domain="food", fn="kitchen_open", opens=[12, 13], closes=[22, 23],
             story="The kitchen of our pub serves food only part of the day."),
    ],
    word_bonus: [
        dict(domain="games", fn="word_points", per=2, pts="points",
             words=["at", "dog", "tree", "apple", "garden", "blanket", "mountain", "adventure", "backgammon",
                    "electricity"],
             story="I'm making a little word game for my kids where they type words to score."),
        dict(domain="education", fn="spelling_stars", per=1, pts="stars",
             words=["sun", "fish", "house", "pencil", "rainbow", "elephant", "butterfly", "playground",
                    "dinosaurs", "me"],
             story="Our spelling app for primary school rewards each correctly spelled word with stars."),
        dict(domain="typing", fn="typing_coins", per=3, pts="coins",
             words=["go", "key", "type", "speed", "rhythm", "fingers", "keyboard", "precision", "typewriter",
                    "concentrate"],
             story="In my typing trainer each word typed without mistakes earns coins."),
        dict(domain="language", fn="flashcard_xp", per=4, pts="experience points",
             words=["oui", "casa", "libro", "manzana", "ventana", "biblioteca", "mariposa", "zanahoria",
                    "cumpleanos", "yo"],
             story="A vocabulary flashcard app I'm building awards experience points per word learned."),
        dict(domain="puzzles", fn="crossword_score", per=5, pts="points",
             words=["ox", "ale", "iris", "otter", "enigma", "quarrel", "labyrinth", "pineapple", "zigzagging",
                    "crosswords"],
             story="Our crossword club scores each solved answer for the monthly league table."),
    ],
    tip_minimum: [
        dict(domain="restaurants", fn="suggested_tip", arg="bill", tip="tip", thing="bill", rates=[0.12, 0.18, 0.22],
             minimums=[2, 3, 4], default_rate=0.2,
             story="Our restaurant's card terminal suggests a tip to guests when they pay."),
        dict(domain="delivery", fn="driver_tip", arg="order_total", tip="driver tip", thing="order total",
             rates=[0.08, 0.12, 0.18], minimums=[2.5, 3, 3.5], default_rate=0.1,
             story="A food delivery app adds a tip for the driver to each order by default."),
        dict(domain="salons", fn="stylist_tip", arg="service_price", tip="stylist tip", thing="service price",
             rates=[0.12, 0.18, 0.25], minimums=[4, 5, 6], default_rate=0.2,
             story="The booking system of my hair salon suggests a tip for the stylist."),
        dict(domain="taxis", fn="taxi_tip", arg="fare", tip="taxi tip", thing="fare", rates=[0.08, 0.12, 0.18],
             minimums=[1.5, 2, 2.5], default_rate=0.1,
             story="The payment screen in our taxis proposes a tip at the end of the ride."),
        dict(domain="hotels", fn="service_charge", arg="invoice", tip="service charge", thing="invoice",
             rates=[0.08, 0.12, 0.125], minimums=[10, 15, 20], default_rate=0.1,
             story="Our hotel adds a service charge to banquet invoices."),
    ],
    overtime: [
        dict(domain="manufacturing", fn="weekly_pay", period="per week", limits=[35, 36, 44, 45], default_limit=40,
             story="The factory where I do payroll pays hourly workers weekly."),
        dict(domain="healthcare", fn="shift_pay", period="per shift", limits=[10, 12], default_limit=8,
             story="Our hospital pays agency nurses per shift."),
        dict(domain="call centres", fn="agent_pay", period="per week", limits=[32, 37.5, 48], default_limit=40,
             story="A call centre asked me to compute the weekly wage of its phone agents."),
        dict(domain="logistics", fn="picker_day_pay", period="per day", limits=[6, 7, 11], default_limit=8,
             story="Warehouse pickers at our depot are paid by the day."),
        dict(domain="leisure", fn="lifeguard_pay", period="per fortnight", limits=[70, 75, 90], default_limit=80,
             story="Lifeguards at the lake are paid every two weeks."),
    ],
    loyalty_points: [
        dict(domain="cafe", fn="coffee_stars", point="star", pers=[2, 4, 5], caps=[15, 20, 30],
             story="Our café's loyalty card gives stars for purchases."),
        dict(domain="books", fn="bookshop_points", point="point", pers=[5, 20, 25], caps=[40, 50, 80],
             story="An independent bookshop wants a points scheme for regulars."),
        dict(domain="cinema", fn="cinema_points", point="point", pers=[4, 5, 8], caps=[25, 35, 60],
             story="The cinema's membership app rewards ticket and snack purchases."),
        dict(domain="groceries", fn="grocery_points", point="point", pers=[2, 3, 20], caps=[100, 150, 200],
             story="Our supermarket's card scheme needs the points for each shopping trip."),
        dict(domain="fuel", fn="fuel_points", point="point", pers=[2, 4, 5], caps=[30, 40, 75],
             story="The petrol station's app rewards drivers when they fill up."),
    ],
    tax_exempt: [
        dict(domain="groceries", fn="till_price", rates=[0.06, 0.0725, 0.085], categories=["food", "drinks",
                                                                                            "household"],
             story="I'm writing the till software for a corner shop."),
        dict(domain="books", fn="bookshop_price", rates=[0.05, 0.08, 0.13], categories=["books", "stationery",
                                                                                          "gifts"],
             story="Our bookshop's price display should show what the customer pays."),
        dict(domain="pharmacy", fn="pharmacy_price", rates=[0.07, 0.09, 0.2], categories=["medicine", "cosmetics",
                                                                                            "snacks"],
             story="A pharmacy chain needs the final price for each item on the shelf label."),
        dict(domain="gardening", fn="garden_centre_price", rates=[0.06, 0.075, 0.19],
             categories=["plants", "tools", "furniture"],
             story="The garden centre's self-service kiosk shows prices including tax."),
        dict(domain="children", fn="kids_store_price", rates=[0.05, 0.0825, 0.15],
             categories=["clothing", "toys", "games"],
             story="A children's store wants shelf prices to include sales tax."),
    ],
    tax_allowance: [
        dict(domain="taxes", fn="income_tax", arg="income", thing="income", allowances=[11000, 12500, 15000],
             default=10000, story="I'm making a rough income tax estimator for freelancers."),
        dict(domain="customs", fn="import_duty", arg="goods_value", thing="goods value",
             allowances=[150, 300, 430], default=100,
             story="Travellers returning home declare goods bought abroad at customs."),
        dict(domain="gambling", fn="winnings_tax", arg="winnings", thing="winnings", allowances=[600, 1200, 2000],
             default=1000, story="A lottery office computes the tax withheld on prizes."),
        dict(domain="gifts", fn="gift_tax", arg="gift_amount", thing="gift", allowances=[15000, 17000, 18000],
             default=10000, story="A family finance tool estimates the tax owed on large gifts."),
        dict(domain="payroll", fn="bonus_tax", arg="bonus", thing="bonus", allowances=[500, 750, 2500],
             default=1000, story="Our payroll system withholds tax on year-end bonuses."),
    ],
    top_n: [
        dict(domain="games", fn="leaderboard", thing="player", things="players", score="high score",
             names=["ava", "ben", "cho", "dev", "eli", "fay", "gus", "hal", "ivy", "jon", "kim", "lou", "max"],
             story="The arcade in the mall wants a leaderboard screen by the entrance."),
        dict(domain="sales", fn="top_sellers", thing="salesperson", things="salespeople", score="monthly sales",
             names=["Dana", "Eric", "Fatima", "Greg", "Hana", "Ian", "Julia", "Kofi", "Lena", "Mo", "Nina", "Omar",
                    "Pia"],
             story="Our sales team has an 'employee of the month' board in the kitchen."),
        dict(domain="education", fn="spelling_finalists", thing="pupil", things="pupils", score="round score",
             names=["Amy", "Bilal", "Cora", "Dan", "Emma", "Finn", "Gita", "Hugo", "Isla", "Jack", "Kai", "Lily",
                    "Mia"],
             story="At the school spelling bee we announce the finalists after the first round."),
        dict(domain="books", fn="club_picks", thing="book", things="books", score="vote count",
             names=["Dune", "Emma", "Ulysses", "Beloved", "Rebecca", "Ivanhoe", "Middlemarch", "Persuasion",
                    "Dracula", "Frankenstein", "Kindred", "Matilda", "Possession"],
             story="Our book club votes on what to read next and shortlists the favourites."),
        dict(domain="hackathons", fn="jury_shortlist", thing="team", things="teams", score="jury score",
             names=["alpha", "bravo", "comet", "delta", "ember", "flux", "glide", "helix", "ion", "jolt", "kite",
                    "lumen", "nova"],
             story="The jury of our weekend hackathon shortlists teams for the final pitch."),
    ],
    default_label: [
        dict(domain="clothing", fn="size_name", code="size code",
             mapping={"S": "small", "M": "medium", "L": "large", "XL": "extra large"},
             unknown=["XS", "XXL", "m", "", "medium", "3XL"],
             story="Our clothing shop's labels print the size as a word."),
        dict(domain="support", fn="priority_label", code="priority number",
             mapping={1: "low", 2: "normal", 3: "high", 4: "urgent"}, unknown=[0, 5, -1, 10, 99, 7],
             story="Support tickets come with a priority number and the dashboard shows a label."),
        dict(domain="weather", fn="weather_text", code="weather code",
             mapping={"CLR": "clear", "CLD": "cloudy", "RN": "rain", "SN": "snow"},
             unknown=["FG", "TS", "clr", "", "HAIL", "WND"],
             story="A weather feed sends short codes, and our display turns them into words."),
        dict(domain="files", fn="file_kind", code="file extension",
             mapping={"jpg": "image", "png": "image", "mp3": "audio", "pdf": "document"},
             unknown=["exe", "zip", "JPG", "", "docx", "mp4"],
             story="Our file browser shows what kind of file each entry is."),
        dict(domain="travel", fn="airport_city", code="airport code",
             mapping={"LHR": "London", "CDG": "Paris", "FCO": "Rome", "MAD": "Madrid"},
             unknown=["JFK", "lhr", "XXX", "", "BER", "OSL"],
             story="A travel booking page shows the city name next to each airport code."),
    ],
    unit_suffix: [
        dict(domain="retail", fn="price_tag", arg="amount", decimals=2, suffixes=[" kr", " SEK", ":-"],
             values=[0, 9.5, 12, 99.99, 100, 1.005, 250.4, 3.14159, 42, 7.777],
             story="Price tags in our Swedish shop need the right currency format."),
        dict(domain="running", fn="distance_label", arg="km", decimals=1, suffixes=[" km", "km", " kilometres"],
             values=[0, 5, 10.25, 21.1, 42.195, 3.33, 0.5, 15.75, 7, 100],
             story="My running app shows the distance of each run on the summary card."),
        dict(domain="games", fn="score_label", arg="points", decimals=0, suffixes=[" pts", " points", "p"],
             values=[0, 1, 12.4, 99.6, 1000, 7, 250, 3.5, 42, 18.2],
             story="The scoreboard of our quiz app shows each team's points."),
        dict(domain="shipping", fn="weight_label", arg="kg", decimals=2, suffixes=[" kg", "kg", " kilos"],
             values=[0, 0.25, 1, 2.5, 19.999, 30, 4.125, 12.3, 0.01, 7],
             story="Shipping labels from our warehouse print the parcel weight."),
        dict(domain="weather", fn="temperature_label", arg="celsius", decimals=1, suffixes=[" °C", "°C", " C"],
             values=[0, -5, 21.5, 37.77, -12.25, 100, 3.05, 18, 25.44, -0.4],
             story="A small weather station display shows the outdoor temperature."),
    ],
    kth_free: [
        dict(domain="cafe", fn="coffee_card_total", item="coffee", price=3.5,
             story="Our café runs a stamp card for regulars."),
        dict(domain="car care", fn="car_wash_total", item="wash", price=12,
             story="A car wash sells multi-wash packages to fleet customers."),
        dict(domain="bakery", fn="bagel_total", item="bagel", price=1.25,
             story="Our bagel shop has a deal for customers who buy in bulk."),
        dict(domain="laundry", fn="laundry_total", item="load", price=4.75,
             story="The laundromat gives regular customers a deal on washing loads."),
        dict(domain="pizza", fn="pizza_order_total", item="pizza", price=9,
             story="A pizzeria takes big orders for office parties and sports clubs."),
    ],
    clamp_add: [
        dict(domain="games", fn="drink_potion", arg="health", units="health points", action="potion",
             amounts=[15, 25, 35], maxima=[80, 120, 150], default_max=100, default_amount=10,
             story="In my fantasy game the hero can drink healing potions."),
        dict(domain="parking", fn="add_coin", arg="minutes_left", units="minutes", action="coin",
             amounts=[12, 15, 20], maxima=[90, 120, 180], default_max=60, default_amount=30,
             story="A parking meter adds time for each coin inserted."),
        dict(domain="games", fn="charge_shield", arg="shield", units="shield points", action="charge",
             amounts=[8, 12, 40], maxima=[60, 75, 200], default_max=100, default_amount=10,
             story="Spaceships in my arcade game can recharge their shields."),
        dict(domain="fitness", fn="log_water", arg="glasses", units="glasses", action="logged bottle",
             amounts=[3, 4], maxima=[10, 12, 14], default_max=8, default_amount=1,
             story="A hydration tracker counts glasses of water drunk today."),
        dict(domain="home", fn="boost_heating", arg="setpoint", units="degrees", action="boost",
             amounts=[2, 3, 4], maxima=[26, 27, 28], default_max=30, default_amount=1,
             story="Our smart thermostat has a boost button that raises the target temperature."),
    ],
    tolerance_fine: [
        dict(domain="traffic", fn="speeding_fine", arg="speed", limit_arg="limit", unit="km/h", units="km/h", limit=50,
             tols=[4, 6, 8], pers=[7, 8, 12], default_tol=1, default_per=10, step=1,
             story="Our town is installing a speed camera and the back office computes fines automatically."),
        dict(domain="freight", fn="overweight_fine", arg="weight_kg", limit_arg="max_kg", unit="kilogram",
             limit=40000, tols=[300, 500], pers=[0.4, 0.75, 1.25], default_tol=100, default_per=1, step=10,
             story="A weigh station on the highway checks trucks against their permitted weight."),
        dict(domain="noise", fn="noise_fine", arg="decibels", limit_arg="limit_db", unit="decibel", limit=85,
             tols=[3, 5], pers=[20, 25, 40], default_tol=1, default_per=10, step=1,
             story="The city fines outdoor venues that are too loud."),
        dict(domain="utilities", fn="water_overuse_fee", arg="litres", limit_arg="quota", unit="litre", limit=5000,
             tols=[200, 250, 400], pers=[0.02, 0.03, 0.04], default_tol=100, default_per=0.01, step=10,
             story="During droughts each household gets a water quota and a fee for using more."),
        dict(domain="libraries", fn="print_quota_fee", arg="pages", limit_arg="quota", unit="page", limit=100,
             tols=[5, 8, 10], pers=[0.15, 0.2, 0.3], default_tol=2, default_per=0.1, step=1,
             story="Students get a free printing quota at the university library."),
    ],
    late_points: [
        dict(domain="education", fn="homework_mark", thing="homework assignment", full=100,
             story="I teach secondary school and mark homework out of 100."),
        dict(domain="contests", fn="essay_score", thing="essay entry", full=95,
             story="Our essay contest scores entries, and some arrive after the deadline."),
        dict(domain="science", fn="lab_report_mark", thing="lab report", full=90,
             story="In my university lab course reports are marked out of 100."),
        dict(domain="programming", fn="assignment_score", thing="coding assignment", full=100,
             story="The autograder for my programming class applies late penalties."),
        dict(domain="art", fn="portfolio_mark", thing="portfolio", full=88,
             story="Art school portfolios are graded by a panel, and late ones lose marks."),
    ],
    ceil_boxes: [
        dict(domain="farming", fn="egg_cartons", arg="eggs", box="carton", items="eggs", ks=[6, 15, 18, 30],
             default=12, story="Our farm packs eggs for the market every morning."),
        dict(domain="web", fn="page_count", arg="results", box="page", items="results", ks=[15, 20, 25, 30],
             default=10, story="The search page of our site splits results over several pages."),
        dict(domain="travel", fn="buses_needed", arg="passengers", box="bus", items="passengers", ks=[40, 45, 52],
             default=50, story="A school is organising a day trip and needs to book coaches."),
        dict(domain="warehouse", fn="pallets_needed", arg="boxes", box="pallet", items="boxes", ks=[24, 36, 40],
             default=50, story="Our warehouse stacks boxes onto pallets for shipping."),
        dict(domain="events", fn="tables_needed", arg="guests", box="table", items="guests", ks=[6, 8, 12],
             default=10, story="I plan wedding receptions and need to know how many tables to rent."),
    ],
    compound: [
        dict(domain="banking", fn="savings_balance", arg="deposit", thing="balance", start=1000,
             rates=[0.015, 0.025, 0.035, 0.045],
             story="A savings calculator on our bank's site shows what a deposit grows to."),
        dict(domain="housing", fn="future_rent", arg="rent", thing="rent", start=1200, rates=[0.02, 0.03, 0.04],
             story="Tenants want to see how our rent-increase clause plays out."),
        dict(domain="education", fn="future_tuition", arg="tuition", thing="tuition", start=9000,
             rates=[0.035, 0.04, 0.06], story="Parents planning for college ask how much tuition will cost later."),
        dict(domain="subscriptions", fn="future_price", arg="price", thing="subscription price", start=12.99,
             rates=[0.07, 0.08, 0.12], story="Our streaming service forecasts its monthly subscription price."),
        dict(domain="investing", fn="fund_value", arg="amount", thing="fund value", start=5000,
             rates=[0.04, 0.06, 0.07], story="A retirement planner estimates what an index fund will be worth."),
    ],
    slug: [
        dict(domain="blogging", fn="post_slug", limits=[18, 20, 24],
             titles=["Hello World", "My Trip To Lisbon In Spring", "Ten Tips For Better Sleep Tonight", "Why",
                     "The Best Sourdough Recipe I Know", "Notes On Moving House", "A B C",
                     "Learning Python As A Grown Up Beginner", "Cats", "What I Read In January And February"],
             story="My blog engine builds the web address of each post from its title."),
        dict(domain="reports", fn="report_filename", limits=[16, 22, 25],
             titles=["Q1 Sales", "Annual Budget Review For The Board", "Team Offsite Agenda Draft",
                     "Incident Report", "Customer Survey Results Summer Edition", "Hiring Plan", "Ops",
                     "Marketing Spend By Channel And Region", "Weekly Update", "Risk Register Full Version"],
             story="Our reporting tool saves each report under a name built from its title."),
        dict(domain="web", fn="css_class", limits=[12, 14, 15],
             titles=["Main Menu", "Primary Call To Action Button", "Footer Links Area", "Hero", "Blog Post Card Image",
                     "Top Nav Search Field", "Big Red Banner Text Here", "Side", "User Avatar Small Round",
                     "Card Title"],
             story="Designers name components in plain words and our tool turns them into CSS class names."),
        dict(domain="cooking", fn="recipe_id", limits=[20, 24, 26],
             titles=["Pancakes", "Grandma's Famous Apple Pie With Cream", "Quick Tomato Soup",
                     "Slow Cooker Beef Stew For Winter", "Lemon Drizzle Cake", "Green Salad", "Chili",
                     "Roast Chicken With Garlic And Herbs", "Mushroom Risotto For Two People", "Fruit Bowl"],
             story="Our recipe site stores each recipe under a short key made from its name."),
        dict(domain="tagging", fn="tag_key", limits=[10, 12, 14],
             titles=["Travel", "Road Trips Across Europe", "Family Photos", "Food And Drink Reviews",
                     "Hiking Gear Lists", "Art", "Weekend Projects At Home", "Music Festivals Summer", "Dogs Cats",
                     "Old Film Cameras"],
             story="Photos in our gallery app get tags, stored under a compact key."),
    ],
    initials: [
        dict(domain="events", fn="badge_initials",
             names=["Ada Lovelace", "Grace Brewster Murray Hopper", "alan turing", "Margaret Heafield Hamilton",
                    "Linus", "John Ronald Reuel Tolkien", "mary ann evans", "Edsger Wybe Dijkstra",
                    "Katherine Coleman Goble Johnson", "tim berners lee"],
             story="Name badges at our conference show the attendee's initials in a big circle."),
        dict(domain="textiles", fn="monogram",
             names=["Sofia Loren", "Anna Maria Louisa de Medici", "jean paul gaultier", "Coco", "Karl Otto Lagerfeld",
                    "vivienne isabel swire westwood", "Yves Henri Donat Mathieu Saint Laurent", "Tom Ford",
                    "giorgio armani", "Donna Ivy Faske Karan"],
             story="We embroider monograms on towels ordered through our web shop."),
        dict(domain="workflow", fn="approval_stamp",
             names=["Priya Raman", "Jose Luis Garcia Lopez", "li wei", "Oluwaseun Adebayo Okafor", "Sam",
                    "Mary Jane Watson Parker", "hans peter mueller", "Ana Sofia Pereira Costa", "Kim Lee",
                    "jean claude van damme"],
             story="Documents approved in our workflow tool get the approver's initials stamped on them."),
        dict(domain="chess", fn="scoresheet_initials",
             names=["Magnus Carlsen", "Judit Polgar", "jose raul capablanca", "Vishwanathan Anand",
                    "Garry Kimovich Kasparov", "Mikhail Nekhemyevich Tal", "Hou", "bobby james fischer",
                    "Alexandra Kosteniuk", "Anatoly Yevgenyevich Karpov"],
             story="Our chess club prints short player codes on tournament scoresheets."),
        dict(domain="rotas", fn="rota_code",
             names=["Ben Okoro", "Chloe Anne Marie Martin", "dev patel", "Ella Grace Rose Thompson", "Zoe",
                    "Liam James Patrick Murphy", "noah ben david", "Olivia May Jane Brown", "Ravi Shankar",
                    "Isabel Maria Cruz Santos"],
             story="The staff rota on our ward is a tight grid, so each nurse gets a short code."),
    ],
    mask_digits: [
        dict(domain="payments", fn="mask_card", arg="card_number", thing="card number",
             values=["4111111111111111", "5500005555555559", "340000000000009", "6011000990139424", "1234",
                     "987654321", "4000056655665556", "12", "3530111333300000", "5105105105105100"],
             story="Receipts from our shop must not show customers' full card numbers."),
        dict(domain="telecom", fn="mask_phone", arg="phone", thing="phone number",
             values=["07700900123", "02079460958", "5551234", "447911123456", "999", "0161496000", "12345",
                     "13105550199", "0800123456", "61491570156"],
             story="Our support tool shows callers' phone numbers to agents only partly."),
        dict(domain="banking", fn="mask_account", arg="account", thing="account number",
             values=["12345678", "00012345", "987654321012", "55", "31926819", "40308669", "1000000001",
                     "765432", "20041144", "8888888888888"],
             story="Bank statements we email show the account number, but not all of it."),
        dict(domain="membership", fn="mask_member_id", arg="member_id", thing="membership number",
             values=[100234, 55500012, 9, 123456789, 42424242, 7000001, 31337, 80808080, 246810, 1111111111],
             story="Membership cards printed for our sports club show the member number partly hidden."),
        dict(domain="shipping", fn="mask_tracking", arg="tracking", thing="tracking number",
             values=["1Z999AA10123456784", "9400111899223197428490", "420", "7712345678", "123456789012",
                     "92612999897543580000", "5555", "61299998820821171811", "3000000", "1122334455"],
             story="Our public parcel-status page shows tracking numbers with most digits hidden."),
    ],
    temp_alert: [
        dict(domain="gardening", fn="greenhouse_alert", thing="greenhouse", labels=("too hot", "too cold"),
             lows=[8, 10, 12], highs=[30, 32, 35], default=(15, 25),
             story="Sensors in our greenhouse send readings every minute."),
        dict(domain="it", fn="server_room_alert", thing="server room", labels=("overheating", "too cold"),
             lows=[10, 12], highs=[27, 30, 32], default=(18, 24),
             story="The server room of our office has a temperature probe wired to the alarm panel."),
        dict(domain="food safety", fn="fridge_alert", thing="fridge", labels=("too warm", "freezing"),
             lows=[-1.5, -2], highs=[7, 8], default=(1, 4),
             story="Our restaurant logs the walk-in fridge temperature for food safety."),
        dict(domain="pets", fn="aquarium_alert", thing="aquarium", labels=("too warm", "too cold"),
             lows=[19, 20], highs=[30, 31], default=(24, 27),
             story="My tropical fish tank has a thermometer that talks to my phone."),
        dict(domain="wine", fn="cellar_alert", thing="wine cellar", labels=("too warm", "too cold"),
             lows=[5, 6], highs=[20, 21, 22], default=(10, 15),
             story="A wine cellar monitor texts the owner when conditions drift."),
    ],
    xp_level: [
        dict(domain="games", fn="hero_level", arg="xp", pts="experience points", pers=[150, 250, 400],
             story="Players in my role-playing game level up as they collect experience."),
        dict(domain="language", fn="learner_level", arg="points", pts="lesson points", pers=[60, 75, 120],
             story="Our language-learning app shows learners their level on the home screen."),
        dict(domain="reading", fn="reader_level", arg="pages", pts="pages read", pers=[200, 300, 500],
             story="The library's summer reading challenge gives children levels as they read."),
        dict(domain="fitness", fn="walker_level", arg="steps", pts="steps", pers=[5000, 8000, 20000],
             story="A step-counting app turns total steps into a level badge."),
        dict(domain="programming", fn="coder_level", arg="solved", pts="solved puzzles", pers=[3, 4, 6],
             story="Our coding-puzzle site levels users up as they solve puzzles."),
    ],
    threshold_multiplier: [
        dict(domain="games", fn="attack_damage", base="damage", arg="roll", ts=[17, 18], ms=[2.5, 3], default=(20, 2),
             min=1, max=20, dec_t="A roll of {t} or higher is a critical hit.",
             dec_m="A critical hit does {m} times the damage.", q_t="What roll counts as a critical hit?",
             q_m="How much stronger is a critical hit?",
             story="My tabletop game helper rolls a 20-sided die for each attack.",
             ask="A high enough roll is a critical hit that multiplies the damage; otherwise the damage stays as "
                 "it is. Round a multiplied damage to 2 decimals."),
        dict(domain="ride hailing", fn="surge_fare", base="fare", arg="demand", ts=[6, 7], ms=[1.5, 1.8, 2.5],
             default=(9, 2), min=1, max=10, dec_t="Surge pricing starts at demand level {t}.",
             dec_m="During a surge the fare is multiplied by {m}.", q_t="At what demand level does surge pricing start?",
             q_m="By how much is the fare multiplied during a surge?",
             story="Our ride-hailing app rates demand in an area from 1 to 10.",
             ask="When demand is high the fare is multiplied; otherwise it stays as it is. Round a multiplied fare "
                 "to cents."),
        dict(domain="payroll", fn="night_shift_pay", base="pay", arg="start_hour", ts=[18, 19], ms=[1.3, 1.4],
             default=(22, 1.5), min=0, max=23, dec_t="A shift starting at {t}:00 or later is a night shift.",
             dec_m="Night shifts are paid {m} times the normal pay.", q_t="From what start hour is a shift a night shift?",
             q_m="How much extra is a night shift paid?",
             story="Security guards at our site work shifts that start at different hours (0 to 23).",
             ask="Shifts starting late enough in the day count as night shifts and their pay is multiplied. Round "
                 "to cents."),
        dict(domain="rhythm games", fn="combo_points", base="points", arg="combo", ts=[12, 15], ms=[1.5, 3],
             default=(10, 2), min=0, max=25, dec_t="A combo of {t} or more notes multiplies the points.",
             dec_m="The combo multiplier is {m}.", q_t="How long must a combo be for the multiplier?",
             q_m="What is the combo multiplier?",
             story="In my rhythm game, hitting notes in a row builds a combo.",
             ask="A long enough combo multiplies the points of a note; shorter combos score normally. Round to 2 "
                 "decimals."),
        dict(domain="courier", fn="priority_cost", base="cost", arg="priority", ts=[3, 4], ms=[1.25, 1.6],
             default=(7, 2), min=1, max=9, dec_t="Priority {t} and above is express.",
             dec_m="Express costs {m} times the normal price.", q_t="From what priority level is a delivery express?",
             q_m="How much more does express cost?",
             story="Our courier service rates each delivery's priority from 1 to 9.",
             ask="High-priority deliveries go express and their cost is multiplied; others pay the normal cost. "
                 "Round to cents."),
    ],
    best_n_average: [
        dict(domain="education", fn="quiz_average", things="quiz scores", lo=20, hi=100,
             story="My class takes a short quiz every week and the report shows an average."),
        dict(domain="sales", fn="sales_average", things="monthly sales figures", lo=1000, hi=9000,
             story="Our bonus scheme looks at each salesperson's monthly sales."),
        dict(domain="sports", fn="judges_average", things="judges' scores", lo=50, hi=100,
             story="At our gymnastics meet several judges score each routine."),
        dict(domain="running", fn="race_points_average", things="race results", lo=100, hi=999,
             story="Our running club ranks members by the points they collect in races."),
        dict(domain="gaming", fn="season_rating", things="match ratings", lo=10, hi=99,
             story="An esports league rates each player's matches over a season."),
    ],
    two_tier: [
        dict(domain="utilities", fn="water_bill", arg="cubic_metres", unit="cubic metre", low=1.5,
             tiers=[15, 20, 25], highs=[2.75, 3.25, 4], default_tier=10, default_high=3,
             story="Our water company bills households on a rising block tariff."),
        dict(domain="energy", fn="electricity_bill", arg="kwh", unit="kilowatt-hour", low=0.12,
             tiers=[250, 300, 400], highs=[0.2, 0.22, 0.25], default_tier=100, default_high=0.18,
             story="A small electricity co-op charges members in two blocks."),
        dict(domain="childcare", fn="babysitting_fee", arg="hours", unit="hour", low=12,
             tiers=[4, 5], highs=[14, 16, 18], default_tier=8, default_high=15,
             story="I babysit for neighbours and late evenings cost more."),
        dict(domain="storage", fn="storage_cost", arg="months", unit="month", low=40,
             tiers=[6, 9], highs=[55, 60, 65], default_tier=12, default_high=50,
             story="Our self-storage units get pricier after the introductory period."),
        dict(domain="translation", fn="translation_fee", arg="words", unit="word", low=0.08,
             tiers=[2000, 2500, 3000], highs=[0.11, 0.12, 0.14], default_tier=1000, default_high=0.1,
             story="As a freelance translator I quote long documents in two bands."),
    ],
}


# ---------------------------------------------------------------------------------------------------- assembly
def render_call(fn: str, args: tuple) -> str:
    return f"{fn}({', '.join(repr(a) for a in args)})"


def build(seed: int = SEED, n_test: int = N_TEST) -> list[dict]:
    rows = []
    for builder, skins in SKINS.items():
        for k, s in enumerate(skins):
            r = random.Random(f"{seed}-{builder.__name__}-{k}")
            t = builder(s, r)
            if isinstance(t["ask"], tuple):
                rules, rets = t["ask"]
                i, j = PHRASINGS[k % len(PHRASINGS)]
                t["ask"] = f"{rules[i]} {rets[j]}"
            sig = t["code"].split("\n", 1)[0].removesuffix(":")
            calls = [render_call(s["fn"], a) for a in t["tests"]]
            if len(calls) != 10 or len(set(calls)) != 10:
                raise ValueError(f"{builder.__name__}/{s['fn']}: need 10 distinct tests, got {len(set(calls))}")
            rows.append({
                "template": builder.__name__, "domain": s["domain"],
                "problem_description": f"{s['story']} {t['ask']}\n\n{SIG}{sig}",
                "ground_truth": t["code"],
                "test_cases": {f"test_case_{i + 1}": c for i, c in enumerate(calls)},
                "decisions": t["decisions"], "decision_values": t["values"], "questions": t["questions"],
                "guesses": t["guesses"],
            })
    # Held-out split: a seeded draw that takes at least one task of every template (then any others), so the
    # test set covers every kind of function with values and domains the training tasks never had.
    r = random.Random(f"{seed}-split")
    by_template: dict[str, list[int]] = {}
    for i, row in enumerate(rows):
        by_template.setdefault(row["template"], []).append(i)
    test = {r.choice(idx) for idx in by_template.values()}
    rest = [i for i in range(len(rows)) if i not in test]
    test |= set(r.sample(rest, n_test - len(test)))
    order = list(range(len(rows)))
    random.Random(f"{seed}-order").shuffle(order)  # ids do not give the template away
    out = []
    for n, i in enumerate(order, 1):
        row = rows[i]
        out.append({"task_id": f"lite-{n:03d}", "split": "test" if i in test else "train", **row})
    return out


def dumps(rows: list[dict]) -> str:
    return "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=OUT, help=f"file to write (default {OUT.relative_to(ROOT)})")
    ap.add_argument("--seed", type=int, default=SEED)
    ap.add_argument("--check", action="store_true", help="do not write; exit 1 if --out differs from a fresh build")
    a = ap.parse_args(argv)
    text = dumps(build(a.seed))
    if a.check:
        same = a.out.exists() and a.out.read_text(encoding="utf-8") == text
        print(f"{a.out}: {'up to date' if same else 'differs from a fresh build'}")
        return 0 if same else 1
    a.out.write_text(text, encoding="utf-8")
    rows = [json.loads(x) for x in text.splitlines()]
    print(f"wrote {len(rows)} tasks to {a.out} ({sum(x['split'] == 'train' for x in rows)} train, "
          f"{sum(x['split'] == 'test' for x in rows)} test, {len({x['template'] for x in rows})} templates, "
          f"{len({x['domain'] for x in rows})} domains)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
