// Live updates for picogent's pages. The page is complete without this script: every element
// with data-live="/path" gets its inner HTML replaced by each fragment the server sends on that
// server-sent events stream. Fragments are rendered and escaped by the server.
// Times come as <time datetime="…" title="exact time in UTC">3 min ago</time>: the title is
// shown in this browser's time zone, and the words are kept fresh (src/web/readable.rs says
// them the same way).
"use strict";

function ago(milliseconds, at) {
  const minutes = Math.floor(milliseconds / 60000);
  const hours = Math.floor(minutes / 60);
  const days = Math.floor(hours / 24);
  if (minutes < 1) return "just now";
  if (hours < 1) return `${minutes} min ago`;
  if (days < 1) return `${hours} h ago`;
  if (days === 1) return "1 day ago";
  if (days < 31) return `${days} days ago`;
  return `on ${at.toISOString().slice(0, 10)}`;
}

function showTimes(root) {
  for (const element of root.querySelectorAll("time[datetime]")) {
    const at = new Date(element.dateTime);
    if (Number.isNaN(at.getTime())) continue;
    element.textContent = ago(Date.now() - at.getTime(), at);
    element.title = at.toLocaleString(undefined, { dateStyle: "medium", timeStyle: "long" });
  }
}

// A stream the server refused (its cap of live streams, 503) or could not serve is closed by the
// browser for good; it is opened again after a while, so the page goes live again by itself.
// A dropped connection is reopened by the browser itself.
const RETRY_MS = 30000;

function follow(element) {
  const source = new EventSource(element.dataset.live);
  source.addEventListener("message", (event) => {
    element.innerHTML = event.data;
    element.dataset.liveState = "live";
    showTimes(element);
  });
  source.addEventListener("error", () => {
    if (source.readyState === EventSource.CLOSED) {
      element.dataset.liveState = "paused";
      setTimeout(() => follow(element), RETRY_MS * (1 + Math.random()));
    } else {
      element.dataset.liveState = "reconnecting";
    }
  });
}

for (const element of document.querySelectorAll("[data-live]")) {
  follow(element);
}
showTimes(document);
setInterval(() => showTimes(document), 30000);
