// A client with the baseline handlers and the file-system ones.
use acp_rpc::acp_types::*;
use acp_rpc::{ClientContext, acp_client};

struct MyClient;

#[acp_client]
impl MyClient {
    async fn session_request_permission(
        &self,
        _params: RequestPermissionRequest,
    ) -> Result<RequestPermissionResponse, Error> {
        Ok(RequestPermissionResponse::new(RequestPermissionOutcome::Cancelled))
    }
    async fn session_update(&self, _params: SessionNotification, _cx: ClientContext) -> Result<(), Error> {
        Ok(())
    }
    async fn fs_read_text_file(&self, _params: ReadTextFileRequest) -> Result<ReadTextFileResponse, Error> {
        Ok(ReadTextFileResponse::new("contents"))
    }
    async fn fs_write_text_file(&self, _params: WriteTextFileRequest) -> Result<WriteTextFileResponse, Error> {
        Ok(WriteTextFileResponse::new())
    }
}

fn main() {
    use acp_rpc::macro_support::Advertise;
    fn is_client<C: Client<ClientContext>>(_: &C) {}
    is_client(&MyClient);
    assert_eq!(MyClient::CAPABILITIES.len(), 2);
}
