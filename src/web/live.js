// Live updates for picogent's pages. The page is complete without this script: every element
// with data-live="/path" gets its inner HTML replaced by each fragment the server sends on that
// server-sent events stream. Fragments are rendered and escaped by the server.
"use strict";
for (const element of document.querySelectorAll("[data-live]")) {
  const source = new EventSource(element.dataset.live);
  source.addEventListener("message", (event) => {
    element.innerHTML = event.data;
    element.dataset.liveState = "live";
  });
  source.addEventListener("error", () => {
    element.dataset.liveState = "reconnecting";
  });
}
