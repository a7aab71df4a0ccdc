"""The rendered DOM's main blocks, and plain-sentence differences between two pages (the offline simulator's eyes).

`DOM_SCRIPT` runs inside the rendered page (Playwright evaluates it even with the page's own JavaScript off) and
returns `{"page": {width, height, background}, "blocks": [...]}`: every visible element that shows something of
its own — direct text, a background colour different from its parent's, an image, a border — with its tag, text
(collapsed, cut to 80 characters), position and size (CSS px, page coordinates), computed colour, background,
font size, weight, family and text alignment. At most `MAX_BLOCKS` blocks, in document order.
"""

from __future__ import annotations

MAX_BLOCKS = 300

DOM_SCRIPT = """() => {
  const MAX = %d;
  const out = [];
  const de = document.documentElement, body = document.body;
  const pageBg = body ? getComputedStyle(body).backgroundColor : 'rgba(0, 0, 0, 0)';
  const transparent = c => !c || c === 'transparent' || /rgba\\([^)]*,\\s*0\\)$/.test(c);
  const directText = el => {
    let s = '';
    for (const n of el.childNodes) if (n.nodeType === 3) s += n.textContent;
    return s.replace(/\\s+/g, ' ').trim();
  };
  const walk = (el, depth, parentBg) => {
    if (out.length >= MAX || !el || el.nodeType !== 1) return;
    const tag = el.tagName.toLowerCase();
    if (['script', 'style', 'head', 'meta', 'link', 'title', 'noscript', 'template'].includes(tag)) return;
    const cs = getComputedStyle(el);
    if (cs.display === 'none' || cs.visibility === 'hidden' || parseFloat(cs.opacity) === 0) return;
    const r = el.getBoundingClientRect();
    const bg = transparent(cs.backgroundColor) ? parentBg : cs.backgroundColor;
    const text = directText(el);
    const border = parseFloat(cs.borderTopWidth) + parseFloat(cs.borderBottomWidth) > 0 && !transparent(cs.borderTopColor);
    const shows = text || tag === 'img' || tag === 'svg' || tag === 'input' || tag === 'button' ||
                  (bg !== parentBg) || border;
    if (shows && r.width > 0 && r.height > 0) {
      out.push({tag, text: text.slice(0, 80), depth,
                x: Math.round(r.left + scrollX), y: Math.round(r.top + scrollY),
                w: Math.round(r.width), h: Math.round(r.height),
                color: cs.color, background: bg, font_size: parseFloat(cs.fontSize) || 0,
                font_weight: cs.fontWeight, font_family: cs.fontFamily.split(',')[0].replace(/["']/g, '').trim(),
                text_align: cs.textAlign});
    }
    if (tag === 'svg') return;
    for (const c of el.children) walk(c, depth + 1, bg);
  };
  walk(body, 0, transparent(pageBg) ? 'rgb(255, 255, 255)' : pageBg);
  return {page: {width: de ? de.scrollWidth : 0, height: Math.max(de ? de.scrollHeight : 0, body ? body.scrollHeight : 0),
                 background: transparent(pageBg) ? 'rgb(255, 255, 255)' : pageBg},
          blocks: out};
}""" % MAX_BLOCKS
