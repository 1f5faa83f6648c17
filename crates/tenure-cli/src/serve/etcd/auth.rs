//! `Auth`: a client authenticates with the server's token (`--token-file`) as its password,
//! under any user name (`etcdctl --user root:TOKEN`), and gets that token back to present
//! on every call (see `call.rs`). Every `tenure serve` with the same token file accepts it,
//! so a client carries on with another endpoint. Without `--token-file` authentication is
//! not enabled, as on a fresh etcd. etcd's users, roles and permissions are not served.

use super::call::Rpc;
use super::{status, Room};
use tenure_etcd_proto::etcdserverpb::auth_server::Auth;
use tenure_etcd_proto::etcdserverpb::*;
use tonic::{Request, Response, Status};

type Answer<A> = Result<Response<A>, Status>;

#[tonic::async_trait]
impl Auth for Room {
    async fn auth_enable(&self, request: Request<AuthEnableRequest>) -> Answer<AuthEnableResponse> {
        self.unserved(Rpc::read("Auth.AuthEnable"), &request)
    }

    async fn auth_disable(
        &self,
        request: Request<AuthDisableRequest>,
    ) -> Answer<AuthDisableResponse> {
        self.unserved(Rpc::read("Auth.AuthDisable"), &request)
    }

    async fn auth_status(&self, request: Request<AuthStatusRequest>) -> Answer<AuthStatusResponse> {
        self.unary(
            Rpc::open("Auth.AuthStatus"),
            request,
            |room, _| async move {
                Ok(AuthStatusResponse {
                    header: None,
                    enabled: room.0.token.is_some(),
                    auth_revision: 0,
                })
            },
        )
        .await
    }

    async fn authenticate(
        &self,
        request: Request<AuthenticateRequest>,
    ) -> Answer<AuthenticateResponse> {
        self.unary(
            Rpc::open("Auth.Authenticate"),
            request,
            |room, asked| async move {
                let Some(token) = &room.0.token else {
                    return Err(status::auth_not_enabled().into());
                };
                if asked.name.is_empty() || !token.matches(asked.password.as_bytes()) {
                    return Err(status::auth_failed().into());
                }
                Ok(AuthenticateResponse {
                    header: Room::header(room.etcd().revisions().await?.revision),
                    token: asked.password,
                })
            },
        )
        .await
    }

    async fn user_add(&self, request: Request<AuthUserAddRequest>) -> Answer<AuthUserAddResponse> {
        self.unserved(Rpc::read("Auth.UserAdd"), &request)
    }

    async fn user_get(&self, request: Request<AuthUserGetRequest>) -> Answer<AuthUserGetResponse> {
        self.unserved(Rpc::read("Auth.UserGet"), &request)
    }

    async fn user_list(
        &self,
        request: Request<AuthUserListRequest>,
    ) -> Answer<AuthUserListResponse> {
        self.unserved(Rpc::read("Auth.UserList"), &request)
    }

    async fn user_delete(
        &self,
        request: Request<AuthUserDeleteRequest>,
    ) -> Answer<AuthUserDeleteResponse> {
        self.unserved(Rpc::read("Auth.UserDelete"), &request)
    }

    async fn user_change_password(
        &self,
        request: Request<AuthUserChangePasswordRequest>,
    ) -> Answer<AuthUserChangePasswordResponse> {
        self.unserved(Rpc::read("Auth.UserChangePassword"), &request)
    }

    async fn user_grant_role(
        &self,
        request: Request<AuthUserGrantRoleRequest>,
    ) -> Answer<AuthUserGrantRoleResponse> {
        self.unserved(Rpc::read("Auth.UserGrantRole"), &request)
    }

    async fn user_revoke_role(
        &self,
        request: Request<AuthUserRevokeRoleRequest>,
    ) -> Answer<AuthUserRevokeRoleResponse> {
        self.unserved(Rpc::read("Auth.UserRevokeRole"), &request)
    }

    async fn role_add(&self, request: Request<AuthRoleAddRequest>) -> Answer<AuthRoleAddResponse> {
        self.unserved(Rpc::read("Auth.RoleAdd"), &request)
    }

    async fn role_get(&self, request: Request<AuthRoleGetRequest>) -> Answer<AuthRoleGetResponse> {
        self.unserved(Rpc::read("Auth.RoleGet"), &request)
    }

    async fn role_list(
        &self,
        request: Request<AuthRoleListRequest>,
    ) -> Answer<AuthRoleListResponse> {
        self.unserved(Rpc::read("Auth.RoleList"), &request)
    }

    async fn role_delete(
        &self,
        request: Request<AuthRoleDeleteRequest>,
    ) -> Answer<AuthRoleDeleteResponse> {
        self.unserved(Rpc::read("Auth.RoleDelete"), &request)
    }

    async fn role_grant_permission(
        &self,
        request: Request<AuthRoleGrantPermissionRequest>,
    ) -> Answer<AuthRoleGrantPermissionResponse> {
        self.unserved(Rpc::read("Auth.RoleGrantPermission"), &request)
    }

    async fn role_revoke_permission(
        &self,
        request: Request<AuthRoleRevokePermissionRequest>,
    ) -> Answer<AuthRoleRevokePermissionResponse> {
        self.unserved(Rpc::read("Auth.RoleRevokePermission"), &request)
    }
}
