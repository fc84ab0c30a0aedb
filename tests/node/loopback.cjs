// Preloaded (`node --require`) into servers that listen on every interface: a listen without a host binds 127.0.0.1.
const net = require("node:net");
const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  if (typeof args[0] === "number" || (typeof args[0] === "string" && /^\d+$/.test(args[0]))) {
    if (args.length === 1 || typeof args[1] === "function") args.splice(1, 0, "127.0.0.1");
  }
  return listen.apply(this, args);
};
