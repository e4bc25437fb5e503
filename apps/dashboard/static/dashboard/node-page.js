// The node page's data, as the server wrote it into the page (views/node.py), for its modules.

export const page = JSON.parse(document.getElementById("node-page").textContent);
export const canOperate = document.body.dataset.canOperate === "true";
