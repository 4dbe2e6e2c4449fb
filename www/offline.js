// Registers the site's service worker (sw.js at the site root) and asks it
// to keep this page's files, so the next visit loads with the network off.
// Used by both pages' boot.js, never by a widget. When the files are kept,
// <html data-offline="ready"> says so (the end-to-end test waits for it).
export async function keepOffline(siteRoot, pages) {
  if (!('serviceWorker' in navigator)) return;
  try {
    await navigator.serviceWorker.register(new URL('sw.js', siteRoot), { scope: siteRoot.href });
    const registration = await navigator.serviceWorker.ready;
    const channel = new MessageChannel();
    channel.port1.onmessage = (event) => {
      document.documentElement.dataset.offline = event.data.ok ? 'ready' : 'failed';
      if (!event.data.ok) console.warn(`offline copy not kept: ${event.data.error}`);
    };
    registration.active.postMessage({ type: 'keep', pages }, [channel.port2]);
  } catch (e) {
    // The page works without it (a private window, a browser without service workers).
    console.warn(`no offline copy: ${e}`);
  }
}
