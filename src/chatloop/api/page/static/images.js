// The composer's images (issue 44): attached with the button, pasted (Ctrl/Cmd+V) or dropped on the composer, shown
// as removable thumbnails, checked against the server's limits (the page is served with them on #attach), and sent
// to /chat as image_url parts with data: URLs. Images reach the DOM only as <img> elements whose src is set as a
// property, never as HTML made from strings; only data: URLs of the four image types are shown (the CSP allows no
// other image source, and the page loads nothing from elsewhere).
"use strict";

const Images = (() => {
  const SHOWN = /^data:image\/(png|jpeg|gif|webp);base64,[A-Za-z0-9+/=\s]*$/;
  let attached = []; // {name, url, encoded}: url is null while the file is read; encoded is its length
  let say = () => {};
  const $ = (id) => document.getElementById(id);

  function limits() {
    const given = $("attach").dataset;
    return {
      count: Number(given.maxImages) || Infinity,
      bytes: Number(given.maxBytes) || Infinity,
      body: Number(given.maxBody) || Infinity,
      types: $("attach").accept.split(","),
    };
  }

  const size = (bytes) => (bytes >= 1e6 ? `${+(bytes / 1e6).toFixed(1)} MB` : `${+(bytes / 1e3).toFixed(1)} KB`);
  const kinds = (types) => types.map((t) => t.split("/")[1].toUpperCase()).join(", ");

  // A data: URL's length: base64 of the file and its "data:image/...;base64," (the server counts it in MAX_BODY_BYTES).
  const encoded = (file) => Math.ceil(file.size / 3) * 4 + 30;
  const ENVELOPE = 1000; // the JSON around the parts: the role, the conversation's id, the field names

  function read(file) {
    return new Promise((resolve, reject) => {
      const reader = new FileReader();
      reader.onload = () => resolve(reader.result);
      reader.onerror = () => reject(reader.error);
      reader.readAsDataURL(file);
    });
  }

  async function add(files) {
    // Each file checked as the server would check it, so a refusal is said here, before anything is sent.
    const limit = limits();
    const problems = [];
    const reading = [];
    let body = ENVELOPE + new Blob([$("question").value]).size;
    for (const entry of attached) body += entry.encoded;
    for (const file of files) {
      const name = file.name || "pasted image";
      if (!limit.types.includes(file.type)) {
        problems.push(`“${name}” was not attached: the server takes ${kinds(limit.types)} images only.`);
      } else if (file.size > limit.bytes) {
        // Rounded alike ("3 MB" over "3 MB"), the two are said in bytes.
        const exact = size(file.size) === size(limit.bytes);
        const [is, most] = [file.size, limit.bytes].map((b) => (exact ? `${b} bytes` : size(b)));
        problems.push(`“${name}” was not attached: it is ${is}, and the server takes images of at most ${most}.`);
      } else if (attached.length >= limit.count) {
        const images = `${limit.count} image${limit.count === 1 ? "" : "s"}`;
        problems.push(`“${name}” was not attached: the server takes at most ${images} with one message.`);
      } else if (body + encoded(file) > limit.body) {
        const all = size(body + encoded(file));
        problems.push(`“${name}” was not attached: with it the message would be ${all}, over the server's ${size(limit.body)}.`);
      } else {
        const entry = { name, url: null, encoded: encoded(file) };
        body += entry.encoded;
        attached.push(entry); // its place is taken now: a second paste meanwhile counts it
        reading.push(read(file).then((url) => (entry.url = url), () => {
          attached = attached.filter((e) => e !== entry);
          problems.push(`“${name}” could not be read.`);
        }));
      }
    }
    await Promise.all(reading);
    if (problems.length) say(problems.join(" "));
    show();
  }

  function show(focus = null) {
    const list = $("attachments");
    list.replaceChildren(...attached.filter((e) => e.url).map(thumbnail));
    list.hidden = !list.children.length;
    $("question").required = !attached.length; // an image may go alone
    focus?.focus();
  }

  function thumbnail(entry) {
    const item = document.createElement("li");
    const remove = document.createElement("button");
    remove.type = "button";
    remove.textContent = "×";
    remove.setAttribute("aria-label", `Remove “${entry.name}”`);
    remove.addEventListener("click", () => {
      attached = attached.filter((e) => e !== entry);
      show($("attach-button"));
    });
    item.append(picture(entry.url, entry.name), remove);
    return item;
  }

  function picture(url, alt) {
    if (typeof url !== "string" || !SHOWN.test(url)) {
      const note = document.createElement("span");
      note.className = "note";
      note.textContent = `[${alt}: not shown here]`;
      return note;
    }
    const image = document.createElement("img");
    image.src = url;
    image.alt = alt;
    return image;
  }

  function turn(text, images) {
    // A user message as the transcript shows it: its text, then its images ({url, alt}).
    const box = document.createElement("section");
    box.className = "turn user";
    box.textContent = text;
    if (images.length) {
      const row = document.createElement("div");
      row.className = "images";
      row.append(...images.map((i) => picture(i.url, i.alt)));
      box.append(row);
    }
    return box;
  }

  function stored(content) {
    // A stored user message (a conversation's item): its text parts, and its images by either wire shape.
    const parts = typeof content === "string" ? [{ text: content }] : (content ?? []);
    const text = parts.map((p) => p.text ?? "").join("");
    const urls = parts.filter((p) => /image/.test(p.type ?? "")).map((p) => p.image_url?.url ?? p.image_url);
    return turn(text, urls.map((url, n) => ({ url, alt: `Attached image ${n + 1}` })));
  }

  function setup(notice) {
    say = notice;
    const form = $("ask");
    $("attach-button").addEventListener("click", () => $("attach").click());
    $("attach").addEventListener("change", () => {
      add([...$("attach").files]);
      $("attach").value = ""; // the same file may be chosen again after it was removed
    });
    form.addEventListener("paste", (event) => {
      const files = [...(event.clipboardData?.files ?? [])];
      if (!files.length) return; // text pastes as text
      event.preventDefault();
      add(files);
    });
    const dragging = (event) => event.dataTransfer?.types.includes("Files");
    form.addEventListener("dragover", (event) => {
      if (!dragging(event)) return;
      event.preventDefault();
      form.classList.add("dropping");
    });
    form.addEventListener("dragleave", () => form.classList.remove("dropping"));
    form.addEventListener("drop", (event) => {
      form.classList.remove("dropping");
      if (!dragging(event)) return;
      event.preventDefault();
      add([...event.dataTransfer.files]);
    });
  }

  return {
    setup,
    turn,
    stored,
    count: () => attached.length,
    ready: () => attached.every((e) => e.url),
    take() {
      const taken = attached;
      attached = [];
      show();
      return taken.map((e) => ({ url: e.url, alt: e.name }));
    },
    restore(taken) {
      // A refused message's images come back to the composer, as its text does.
      attached = [...taken.map((i) => ({ name: i.alt, url: i.url, encoded: i.url.length })), ...attached];
      show();
    },
    content(text, taken) {
      // /chat's user message: plain text, or text and image_url parts when images go with it.
      if (!taken.length) return text;
      const images = taken.map((i) => ({ type: "image_url", image_url: { url: i.url } }));
      return text ? [{ type: "text", text }, ...images] : images;
    },
  };
})();
